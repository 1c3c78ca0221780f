/* Issue 51: a probe of the step checks through torch's stable C shim (aoti_torch_*) and the limited Python API
 * only: no torch C++ ABI, one build for every torch that has them (tools/stable_abi/probe.py builds and runs it). */
/* Prototype: storage-bounds and address checks of a list of tensors through torch's stable C shim only. */
#define Py_LIMITED_API 0x03090000
#include <Python.h>
#include <stdint.h>
#include <stddef.h>
typedef struct AtenTensorOpaque* AtenTensorHandle;
typedef int32_t AOTITorchError;
extern AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle, void**);
extern AOTITorchError aoti_torch_get_storage_size(AtenTensorHandle, int64_t*);
extern AOTITorchError aoti_torch_get_storage_offset(AtenTensorHandle, int64_t*);
extern AOTITorchError aoti_torch_get_numel(AtenTensorHandle, int64_t*);
extern AOTITorchError aoti_torch_get_dtype(AtenTensorHandle, int32_t*);
extern AOTITorchError aoti_torch_is_contiguous(AtenTensorHandle, _Bool*);
extern AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle);

/* c10::ScalarType codes (the shim's dtype codes) -> bytes; 0: not one the kernels take. */
static int64_t itemsize_of(int32_t dtype) {
  switch (dtype) { case 5: case 15: return 2; case 6: return 4; case 7: return 8; default: return 0; }
}
/* 1 when every tensor is contiguous at addresses[i], of its numel, inside its storage; else 0. */
int slotopt_stable_fit(PyObject* capsules, const uint64_t* addresses, const int64_t* numels) {
  const Py_ssize_t n = PyList_Size(capsules);
  for (Py_ssize_t i = 0; i < n; ++i) {
    AtenTensorHandle h = (AtenTensorHandle)PyCapsule_GetPointer(PyList_GetItem(capsules, i), NULL);
    if (h == NULL) { PyErr_Clear(); return 0; }
    void* data; int64_t bytes, offset, numel, itemsize; int32_t dtype; _Bool contiguous;
    if (aoti_torch_get_data_ptr(h, &data) || aoti_torch_get_storage_size(h, &bytes) ||
        aoti_torch_get_storage_offset(h, &offset) || aoti_torch_get_numel(h, &numel) ||
        aoti_torch_get_dtype(h, &dtype) || aoti_torch_is_contiguous(h, &contiguous)) return 0;
    itemsize = itemsize_of(dtype);
    if (!contiguous || (uint64_t)(uintptr_t)data != addresses[i] || numel != numels[i] || itemsize == 0 || offset < 0 ||
        (offset + numel) * itemsize > bytes) return 0;
  }
  return 1;
}
void slotopt_stable_release(PyObject* capsules) {
  const Py_ssize_t n = PyList_Size(capsules);
  for (Py_ssize_t i = 0; i < n; ++i)
    aoti_torch_delete_tensor_object((AtenTensorHandle)PyCapsule_GetPointer(PyList_GetItem(capsules, i), NULL));
}
