"""Load prebuilt modules (tvm_ffi, sha256-checked) and dispatch to them; never imports cutlass."""
