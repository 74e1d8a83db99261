/* The launcher: calls a kernel's TVM-FFI entry point (`__tvm_ffi_<symbol>`) with torch tensors,
 * so that the runtime never imports the tvm_ffi Python package (its import alone measured
 * 155 ms on the H100 host, against a 30 ms budget for import + first call).
 *
 * It is linked into the shared runtime library, which the loader imports as a Python extension
 * (stable ABI 3.10): `Kernel(address, name, owner)` is a callable whose call converts each
 * argument (torch.Tensor -> DLTensor*, int, float, bool, None) into a TVMFFIAny, installs torch's
 * current stream of the first non-CPU tensor's device as the TVM-FFI environment stream (what the
 * kernels launch on), calls the entry point, restores the previous stream and raises the
 * kernel's own error (ValueError, TypeError, ...) with its message. This is what tvm_ffi's Python
 * `Function.__call__` does for the same arguments (tvm_ffi/cython/function.pxi, DLPack exchange
 * API path), through the same torch C API (`__dlpack_c_exchange_api__`, torch >= 2.10).
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030A0000
#include <Python.h>
#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <stdint.h>
#include <string.h>

#define KF_MAX_ARGS 32

static const DLPackExchangeAPI* kf_api = NULL;  /* torch's, found on first call */
static PyObject* kf_tensor_type = NULL;         /* torch.Tensor */

typedef struct {
  PyObject_HEAD
  TVMFFISafeCallType fn;
  PyObject* name;   /* str: the kernel's symbol, for error messages */
  PyObject* owner;  /* keeps the loaded module (its handle) alive */
} KernelObject;

static int kf_bind_torch(void) {
  PyObject* torch = PyImport_ImportModule("torch");
  if (!torch) return -1;
  PyObject* tensor = PyObject_GetAttrString(torch, "Tensor");
  Py_DECREF(torch);
  if (!tensor) return -1;
  PyObject* cap = PyObject_GetAttrString(tensor, "__dlpack_c_exchange_api__");
  if (!cap) {
    Py_DECREF(tensor);
    PyErr_SetString(PyExc_RuntimeError,
                    "kernelforge needs torch >= 2.10 (torch.Tensor.__dlpack_c_exchange_api__ is missing)");
    return -1;
  }
  const DLPackExchangeAPI* api = (const DLPackExchangeAPI*)PyCapsule_GetPointer(cap, "dlpack_exchange_api");
  Py_DECREF(cap);
  if (!api) {
    Py_DECREF(tensor);
    return -1;
  }
  if (api->header.version.major != DLPACK_MAJOR_VERSION || !api->dltensor_from_py_object_no_sync ||
      !api->current_work_stream) {
    Py_DECREF(tensor);
    PyErr_Format(PyExc_RuntimeError, "torch's DLPack exchange API is version %d.%d; kernelforge needs %d.x",
                 (int)api->header.version.major, (int)api->header.version.minor, DLPACK_MAJOR_VERSION);
    return -1;
  }
  kf_tensor_type = tensor;  /* owned for the life of the process */
  kf_api = api;
  return 0;
}

static PyObject* kf_exception_of(const char* kind, size_t len) {
  static const struct { const char* kind; PyObject** exc; } kinds[] = {
      {"ValueError", &PyExc_ValueError},         {"TypeError", &PyExc_TypeError},
      {"IndexError", &PyExc_IndexError},         {"KeyError", &PyExc_KeyError},
      {"AttributeError", &PyExc_AttributeError}, {"MemoryError", &PyExc_MemoryError},
      {"NotImplementedError", &PyExc_NotImplementedError}, {"RuntimeError", &PyExc_RuntimeError},
  };
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
    if (strlen(kinds[i].kind) == len && memcmp(kinds[i].kind, kind, len) == 0) return *kinds[i].exc;
  }
  return NULL;
}

/* Raise the error the kernel left in TVM-FFI's thread-local slot. */
static PyObject* kf_raise(KernelObject* self, int rc) {
  TVMFFIObjectHandle err = NULL;
  TVMFFIErrorMoveFromRaised(&err);
  if (!err) {
    PyErr_Format(PyExc_RuntimeError, "kernel %U failed (TVM-FFI return code %d) without an error", self->name, rc);
    return NULL;
  }
  const TVMFFIErrorCell* cell = (const TVMFFIErrorCell*)((const char*)err + sizeof(TVMFFIObject));
  PyObject* exc = kf_exception_of(cell->kind.data, cell->kind.size);
  PyObject* message = PyUnicode_DecodeUTF8(cell->message.data, (Py_ssize_t)cell->message.size, "replace");
  if (message && !exc) {  /* e.g. CUDADialectError: keep its name in the message */
    PyObject* kind = PyUnicode_DecodeUTF8(cell->kind.data, (Py_ssize_t)cell->kind.size, "replace");
    PyObject* both = kind ? PyUnicode_FromFormat("%U: %U", kind, message) : NULL;
    Py_XDECREF(kind);
    Py_DECREF(message);
    message = both;
  }
  if (message) {
    PyErr_SetObject(exc ? exc : PyExc_RuntimeError, message);
    Py_DECREF(message);
  }
  TVMFFIObjectDecRef(err);
  return NULL;
}

static PyObject* kernel_call(PyObject* obj, PyObject* args, PyObject* kwargs) {
  KernelObject* self = (KernelObject*)obj;
  if (kwargs && PyDict_Size(kwargs)) {
    PyErr_Format(PyExc_TypeError, "kernel %U takes positional arguments only", self->name);
    return NULL;
  }
  if (!kf_api && kf_bind_torch() < 0) return NULL;
  Py_ssize_t n = PyTuple_Size(args);
  if (n < 0) return NULL;
  if (n > KF_MAX_ARGS) {
    PyErr_Format(PyExc_TypeError, "kernel %U: at most %d arguments, got %zd", self->name, KF_MAX_ARGS, n);
    return NULL;
  }
  TVMFFIAny any[KF_MAX_ARGS];
  DLTensor dl[KF_MAX_ARGS];
  int32_t dev_type = kDLCPU, dev_id = -1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GetItem(args, i);
    TVMFFIAny* v = &any[i];
    v->zero_padding = 0;
    v->v_int64 = 0;
    PyTypeObject* t = Py_TYPE(a);
    int is_tensor = t == (PyTypeObject*)kf_tensor_type;
    if (!is_tensor) {
      if (a == Py_None) {
        v->type_index = kTVMFFINone;
        continue;
      } else if (PyBool_Check(a)) {
        v->type_index = kTVMFFIBool;
        v->v_int64 = (a == Py_True);
        continue;
      } else if (PyLong_Check(a)) {
        v->type_index = kTVMFFIInt;
        v->v_int64 = PyLong_AsLongLong(a);
        if (v->v_int64 == -1 && PyErr_Occurred()) return NULL;
        continue;
      } else if (PyFloat_Check(a)) {
        v->type_index = kTVMFFIFloat;
        v->v_float64 = PyFloat_AsDouble(a);
        continue;
      } else if (!PyType_IsSubtype(t, (PyTypeObject*)kf_tensor_type)) {
        /* tp_name is not in the limited API: name the type through Python */
        PyObject* tname = PyObject_GetAttrString((PyObject*)t, "__name__");
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "kernel %U: argument #%zd: expected a torch.Tensor, int, float, bool or None, "
                     "got %S", self->name, i, tname ? tname : Py_None);
        Py_XDECREF(tname);
        return NULL;
      }
    }
    if (kf_api->dltensor_from_py_object_no_sync(a, &dl[i]) != 0) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "kernel %U: argument #%zd cannot be passed through DLPack", self->name, i);
      return NULL;
    }
    v->type_index = kTVMFFIDLTensorPtr;
    v->v_ptr = &dl[i];
    if (dev_id < 0 && dl[i].device.device_type != kDLCPU) {
      dev_type = dl[i].device.device_type;
      dev_id = dl[i].device.device_id;
    }
  }
  void* previous = NULL;
  if (dev_id >= 0) {
    void* stream = NULL;
    if (kf_api->current_work_stream((DLDeviceType)dev_type, dev_id, &stream) != 0) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "kernel %U: torch has no current stream for device %d:%d", self->name,
                     (int)dev_type, (int)dev_id);
      return NULL;
    }
    TVMFFIEnvSetStream(dev_type, dev_id, stream, &previous);
  }
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
  int rc = self->fn(NULL, any, (int32_t)n, &result);
  if (dev_id >= 0) TVMFFIEnvSetStream(dev_type, dev_id, previous, NULL);
  if (rc != 0) return kf_raise(self, rc);
  if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj);
  Py_RETURN_NONE;
}

static PyObject* kernel_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *address, *name, *owner;
  static char* names[] = {"address", "name", "owner", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OUO", names, &address, &name, &owner)) return NULL;
  void* fn = PyLong_AsVoidPtr(address);
  if (!fn) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "address: expected a non-null function address");
    return NULL;
  }
  allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
  KernelObject* self = (KernelObject*)alloc(type, 0);
  if (!self) return NULL;
  self->fn = (TVMFFISafeCallType)fn;
  Py_INCREF(name);
  self->name = name;
  Py_INCREF(owner);
  self->owner = owner;
  return (PyObject*)self;
}

static void kernel_dealloc(PyObject* obj) {
  KernelObject* self = (KernelObject*)obj;
  PyTypeObject* type = Py_TYPE(obj);
  Py_XDECREF(self->name);
  Py_XDECREF(self->owner);
  freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
  tp_free(obj);
  Py_DECREF(type);
}

static PyObject* kernel_repr(PyObject* obj) {
  return PyUnicode_FromFormat("<kernelforge kernel %U>", ((KernelObject*)obj)->name);
}

static PyObject* kernel_get_name(PyObject* obj, void* closure) {
  (void)closure;
  PyObject* name = ((KernelObject*)obj)->name;
  Py_INCREF(name);
  return name;
}

static PyGetSetDef kernel_getset[] = {
    {"name", kernel_get_name, NULL, "the kernel's TVM-FFI symbol (without __tvm_ffi_)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot kernel_slots[] = {
    {Py_tp_new, kernel_new},
    {Py_tp_dealloc, kernel_dealloc},
    {Py_tp_call, kernel_call},
    {Py_tp_repr, kernel_repr},
    {Py_tp_getset, kernel_getset},
    {Py_tp_doc, "Kernel(address, name, owner): a loaded kernel's TVM-FFI entry point, called with torch tensors."},
    {0, NULL},
};

static PyType_Spec kernel_spec = {"kernelforge_launch.Kernel", sizeof(KernelObject), 0, Py_TPFLAGS_DEFAULT,
                                  kernel_slots};

static int launch_exec(PyObject* module) {
  PyObject* type = PyType_FromSpec(&kernel_spec);
  if (!type) return -1;
  if (PyModule_AddObject(module, "Kernel", type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return PyModule_AddIntConstant(module, "MAX_ARGS", KF_MAX_ARGS);
}

static PyModuleDef_Slot launch_slots[] = {{Py_mod_exec, launch_exec}, {0, NULL}};

static struct PyModuleDef launch_module = {
    PyModuleDef_HEAD_INIT, "kernelforge_launch",
    "Calls prebuilt kernels' TVM-FFI entry points with torch tensors (see launch.c).", 0, NULL, launch_slots,
    NULL, NULL, NULL};

/* Multi-phase init: CPython does not cache the module by file name (every runtime library is
 * loaded from its own /proc/self/fd/N). */
PyMODINIT_FUNC PyInit_kernelforge_launch(void) { return PyModuleDef_Init(&launch_module); }
