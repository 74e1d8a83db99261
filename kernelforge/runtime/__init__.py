"""Load prebuilt modules (sha256-checked, called through the runtime library's launcher) and
dispatch to them; never imports cutlass or the tvm_ffi Python package."""
