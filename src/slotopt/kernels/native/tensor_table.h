// slotopt's tensor table, shared by its two translation units: tensor_table.cpp (step plans, the module's
// method table) and tensor_checks.cpp (the per-tensor checks and calls of a step). Both compile into the one
// extension ``_tensor_table``: this header holds what both read of a tensor object and declares what the second
// defines for the first's method table.

#ifndef SLOTOPT_TENSOR_TABLE_H
#define SLOTOPT_TENSOR_TABLE_H

#include <Python.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

namespace slotopt_tensor_table {

// A tensor object slotopt may read directly: torch.Tensor or a subclass (Parameter, slotopt.Variable) whose
// storage holds its elements (no wrapper, functional or meta tensor, no lazy negation or conjugation).
// (Its type is checked as a C type, without Python's ``isinstance`` protocol: no ``__instancecheck__`` or
// ``__class__`` of another object can make a non-tensor pass, and a subclass such as slotopt.Variable is not
// sent through ``isinstance`` on every step.)
inline bool is_tensor_object(PyObject* object) {
  return THPVariableClass != nullptr &&
         (THPVariable_CheckExact(object) ||
          PyType_IsSubtype(Py_TYPE(object), reinterpret_cast<PyTypeObject*>(THPVariableClass)));
}

inline const at::Tensor* dense(PyObject* object) {
  if (!is_tensor_object(object)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(object);
  if (!t.defined() || t.layout() != c10::kStrided || t.is_nested() || !t.has_storage() || t.is_neg() ||
      t.is_conj() || t.unsafeGetTensorImpl()->is_python_dispatch() ||
      t.key_set().has(c10::DispatchKey::Functionalize))  // (a functional wrapper's storage is not its data)
    return nullptr;
  return &t;
}

// Whether the elements of a contiguous tensor lie inside its storage: ``(offset + numel) * itemsize`` bytes, no
// more than the storage holds, from a data pointer that is the storage's own plus the offset. A storage shrunk
// under its tensor (``untyped_storage().resize_``, FSDP's way to free a parameter) fails this even when the
// allocator gave the tensor its old address back.
inline bool in_storage(const at::Tensor& t) {
  const int64_t numel = t.numel();
  if (numel == 0) return true;
  const int64_t offset = t.storage_offset();
  const auto itemsize = static_cast<uint64_t>(t.element_size());
  const c10::Storage& storage = t.storage();
  const auto base = static_cast<const char*>(storage.data());
  if (base == nullptr || offset < 0 || t.const_data_ptr() != base + offset * static_cast<int64_t>(itemsize))
    return false;
  const uint64_t elements = static_cast<uint64_t>(offset) + static_cast<uint64_t>(numel);  // (both < 2^63)
  return elements <= storage.nbytes() / itemsize;
}

// Whether a kernel may write ``t`` now: not an inference tensor outside inference mode (torch refuses that write;
// it is refused before any tensor of the step is written).
inline bool writable(const at::Tensor& t) {
  return !t.is_inference() || c10::InferenceMode::is_enabled();
}

// A step plan (tensor_table.cpp: make_plan, fits; tensor_checks.cpp: still).
// What a plan recorded of one variable.
struct Recorded {
  PyObject* variable;  // borrowed: the plan keeps its variables alive
  const void* address;
  c10::ScalarType dtype;
  c10::Device device;
  std::vector<int64_t> sizes;
};

// Whether ``v`` (a variable's tensor, or null) is still what the plan recorded of it, all a kernel relies on: its
// address, dtype, device, sizes, contiguity, storage bounds and writability (fits, same_tensors, still).
inline bool as_recorded(const at::Tensor* v, const Recorded& r) {
  return v != nullptr && v->const_data_ptr() == r.address && v->scalar_type() == r.dtype && v->device() == r.device &&
         v->sizes() == c10::IntArrayRef(r.sizes) && v->is_contiguous() && in_storage(*v) && writable(*v);
}

// Whether the gradient ``g`` (or null) fits the recorded variable: its dtype and sizes, on the CPU for a plan on
// the CPU, else on the variable's device (fits, still).
inline bool gradient_fits(const at::Tensor* g, const Recorded& r, bool on_cpu) {
  return g != nullptr && g->scalar_type() == r.dtype && g->sizes() == c10::IntArrayRef(r.sizes) &&
         (on_cpu ? g->is_cpu() : g->device() == r.device);
}

struct Plan {
  std::vector<Recorded> variables;
  bool on_cpu = true;
  // The ``(gradient, parameter)`` 2-tuples of the last ``step()`` over the plan (owned references, or null), for
  // ``recycled_pair``.
  std::vector<PyObject*> pairs;

  ~Plan() {
    for (PyObject* pair : pairs) Py_XDECREF(pair);
  }
};

inline const char* const kPlanCapsule = "slotopt.tensor_table.Plan";

// Defined in tensor_checks.cpp (each documented there).
PyObject* first_out_of_range(PyObject*, PyObject* args);
PyObject* slices_fit(PyObject*, PyObject* args);
PyObject* same_kind(PyObject*, PyObject* args);
PyObject* scalar(PyObject*, PyObject* object);
PyObject* increment(PyObject*, PyObject* object);
PyObject* slices(PyObject*, PyObject* args);
PyObject* pin(PyObject*, PyObject* args);
PyObject* still(PyObject*, PyObject* args);
#if defined(__SSE__)
PyObject* enter_step(PyObject*, PyObject*);
PyObject* leave_step(PyObject*, PyObject* token_object);
#endif

}  // namespace slotopt_tensor_table

#endif  // SLOTOPT_TENSOR_TABLE_H
