/* The one symbol that TVM-FFI objects from CuTe-DSL reference but libcuda_dialect_runtime_static.a
 * lacks (cutlass#3635). Same behaviour as libcute_dsl_runtime.so: raise "CUDADialectError". */
#include <stdint.h>
#include <stdio.h>

typedef void (*SetRaisedPartsFn)(const char*, const char**, int32_t);

void CuteDSLRT_TVMFFISetRaisedCudaError(SetRaisedPartsFn set_error, int32_t code) {
  if (!set_error) return;
  char buf[32];
  snprintf(buf, sizeof buf, "%d", code);
  const char* parts[2] = {"CUDA Error Code: ", buf};
  set_error("CUDADialectError", parts, 2);
}
