// slotopt's tensor table: the per-step checks of an ordinary step (engine/plan.py) in one C++ pass.
//
// An ordinary step is checked on every step, for every gradient and variable: type, layout, dtype, device,
// sizes, contiguity and address. Read from Python, each of those properties costs a call into torch's
// bindings (about 50 ns); read here, from the tensor itself, a whole step's checks cost a few nanoseconds per
// tensor. The checks are exactly those of the Python path (``StepPlan.fits`` and ``state_operands``); tests run
// both on the same hostile inputs.
//
// Unlike the rule library (slotopt_kernels.c, plain C), this module uses torch's C++ API, so it only works with
// the torch it was built against: the build records that torch's version, and slotopt loads the module only
// under the same one (kernels/native/tensor_table.py); anywhere else the Python path runs, with the same result.

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

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#ifndef SLOTOPT_TORCH_VERSION
#define SLOTOPT_TORCH_VERSION "unknown"
#endif

namespace {

// torch.nn.Parameter (looked up once; a borrowed, immortal-for-our-purposes reference kept by the module).
PyObject* parameter_type() {
  static PyObject* type = nullptr;
  if (type == nullptr) {
    PyObject* module = PyImport_ImportModule("torch.nn.parameter");
    if (module == nullptr) return nullptr;
    type = PyObject_GetAttrString(module, "Parameter");
    Py_DECREF(module);
  }
  return type;
}

// What a plan recorded of one variable.
struct Recorded {
  PyObject* variable;  // borrowed: the plan keeps its variables alive
  const void* address;
  c10::ScalarType dtype;
  c10::Device device;
  std::vector<int64_t> sizes;
};

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

const char* kPlanCapsule = "slotopt.tensor_table.Plan";

const at::Tensor kUndefined;  // (the gradient of a tensor without autograd metadata)

void free_plan(PyObject* capsule) {
  delete static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
}

// The pair ``(grad, param)`` of position ``i`` of a ``step()``: the tuple of the last step when nothing but the
// plan holds it any more, its gradient replaced (as ``zip`` recycles its result tuple), else a new tuple, kept for
// the next step. A step then allocates no tuple per parameter: each allocation counts towards Python's next
// garbage collection, which walks every young tuple and the tensors it holds (measured: most of the checks' time
// on 3,000 parameters). A replaced reference is moved to ``released``, for the caller to drop after its pass
// (dropping it may run a finalizer, which must not run while the pass holds borrowed references).
PyObject* recycled_pair(Plan* plan, size_t i, PyObject* grad, PyObject* param, std::vector<PyObject*>& released) {
  if (plan->pairs.size() != plan->variables.size()) plan->pairs.assign(plan->variables.size(), nullptr);
  PyObject*& kept = plan->pairs[i];
#ifdef Py_GIL_DISABLED
  // A free-threaded Python: a tuple's reference count says nothing about other threads' borrowed references, so
  // no tuple is ever changed after it was handed out (a new one per pair).
  constexpr bool kRecycle = false;
#else
  constexpr bool kRecycle = true;
#endif
  if (kRecycle && kept != nullptr && Py_REFCNT(kept) == 1 && PyTuple_GET_ITEM(kept, 1) == param) {
    PyObject* old = PyTuple_GET_ITEM(kept, 0);
    if (old != grad) {
      Py_INCREF(grad);
      PyTuple_SET_ITEM(kept, 0, grad);
      released.push_back(old);
    }
    if (!PyObject_GC_IsTracked(kept)) PyObject_GC_Track(kept);  // (the collector may have untracked it)
    Py_INCREF(kept);
    return kept;
  }
  PyObject* pair = PyTuple_Pack(2, grad, param);
  if (pair == nullptr) return nullptr;
  if (kept != nullptr) released.push_back(kept);
  Py_INCREF(pair);
  kept = pair;
  return pair;
}

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

// Reading a tensor's properties chases pointers: the Python object, its TensorImpl, its StorageImpl, its version
// counter, its autograd metadata. Over thousands of small tensors out of cache each link is a miss, and a loop that
// checks one tensor after another waits for them one by one (measured: ~110 ns per tensor). The checks therefore
// run in blocks of ``kBlock`` tensors whose links are requested first, one level at a time for the whole block: the
// loads of a level are independent, so their misses overlap, and the checks then read from cache. (Prefetches are
// hints: they never fault and change no value, so a link that is not what it seems costs nothing but time.)
constexpr Py_ssize_t kBlock = 16;  // (8 and 32 measured no better)

// Requests every 64-byte line that holds a byte of [address, address + bytes).
inline void prefetch_bytes(const void* address, size_t bytes, bool write = false) {
  const auto first = reinterpret_cast<uintptr_t>(address) & ~static_cast<uintptr_t>(63);
  const auto end = reinterpret_cast<uintptr_t>(address) + bytes;
  for (uintptr_t line = first; line < end; line += 64) {
    if (write)
      __builtin_prefetch(reinterpret_cast<const void*>(line), 1);
    else
      __builtin_prefetch(reinterpret_cast<const void*>(line));
  }
}

// The TensorImpl of a tensor object, or null (not a tensor object; nothing else is read).
inline const c10::TensorImpl* impl_of(PyObject* object) {
  return is_tensor_object(object) ? THPVariable_Unpack(object).unsafeGetTensorImpl() : nullptr;
}

// What ``warm`` requests of each tensor besides its object and TensorImpl.
enum Links : unsigned { kStorage = 1, kVersion = 2 };

// Requests, level by level, the memory the checks will read of ``m`` (<= kBlock) tensor objects (the k-th is
// ``object_of(k)``): the objects, their TensorImpls, then the ``links`` of each.
template <typename ObjectOf>
void warm(Py_ssize_t m, ObjectOf object_of, unsigned links) {
  const c10::TensorImpl* impls[kBlock];
  for (Py_ssize_t i = 0; i < m; ++i) prefetch_bytes(object_of(i), sizeof(THPVariable));
  for (Py_ssize_t i = 0; i < m; ++i) {
    impls[i] = impl_of(object_of(i));
    if (impls[i] != nullptr) prefetch_bytes(impls[i], sizeof(c10::TensorImpl));
  }
  for (Py_ssize_t i = 0; i < m; ++i) {
    const c10::TensorImpl* impl = impls[i];
    if (impl == nullptr) continue;
    // (Only what public headers show: the version counter's block is private to c10, so it is not requested.)
    if (links & (kStorage | kVersion))
      prefetch_bytes(impl->unsafe_storage().unsafeGetStorageImpl(), sizeof(c10::StorageImpl));
  }
}

// make_plan(variables) -> capsule, or None when a variable cannot be read directly (the Python path then runs).
PyObject* make_plan(PyObject*, PyObject* variables) {
  if (!PyList_CheckExact(variables)) {
    PyErr_SetString(PyExc_TypeError, "make_plan takes a list of tensors");
    return nullptr;
  }
  Py_ssize_t n = PyList_GET_SIZE(variables);
  auto plan = new Plan();
  plan->variables.reserve(n);
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* object = PyList_GET_ITEM(variables, i);
      const at::Tensor* t = dense(object);
      if (t == nullptr || !t->is_contiguous() || !in_storage(*t)) {
        delete plan;
        Py_RETURN_NONE;
      }
      plan->variables.push_back(
          {object, t->const_data_ptr(), t->scalar_type(), t->device(), t->sizes().vec()});
      plan->on_cpu = plan->on_cpu && t->is_cpu();
    }
  } catch (const std::exception&) {  // a tensor torch cannot answer for: the Python path decides
    delete plan;
    Py_RETURN_NONE;
  }
  return PyCapsule_New(plan, kPlanCapsule, free_plan);
}

// Whether ``variable`` has a ``constraint`` attribute that is not None, as ``getattr(variable, "constraint",
// None)`` sees it: 1 or 0, or -1 when reading it raised (the Python scan then reports the error).
int has_constraint(PyObject* variable) {
  static PyObject* name = PyUnicode_InternFromString("constraint");
  if (name == nullptr) return -1;
  PyObject* value = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  int found = PyObject_GetOptionalAttr(variable, name, &value);
#else
  // (Before 3.13 the same function is named ``_PyObject_LookupAttr``: 3.13 made it public under the name above. A
  // missing attribute, the common case, then raises no AttributeError object, which would cost more than the
  // whole check of a tensor; a ``constraint`` that raises when read is told apart from a missing one.)
  int found = _PyObject_LookupAttr(variable, name, &value);
#endif
  if (found < 0) {
    PyErr_Clear();
    return -1;
  }
  int constrained = found == 1 && value != Py_None;
  Py_XDECREF(value);
  return constrained;
}

// ``warm`` for reading the attributes of the variables of the block of a plan starting at ``begin`` (m <= kBlock):
// the objects themselves (where CPython keeps an instance's attributes is its own business: not requested).
void warm_attributes(const Plan* plan, Py_ssize_t begin, Py_ssize_t m) {
  for (Py_ssize_t k = 0; k < m; ++k) prefetch_bytes(plan->variables[begin + k].variable, sizeof(THPVariable));
}

// ``warm`` for the block of a step starting at ``begin`` (m <= kBlock items): the variables (known from the plan)
// and their storages, the gradients (read from each variable's autograd metadata, or from each pair) and their
// storages and Python objects, and the pair tuples the step will reuse.
void warm_step(const Plan* plan, PyObject** items, Py_ssize_t begin, Py_ssize_t m, bool from_params) {
  const c10::TensorImpl* variables[kBlock];
  const c10::TensorImpl* grads[kBlock];
  PyObject* grad_objects[kBlock];
  for (Py_ssize_t k = 0; k < m; ++k) {
    prefetch_bytes(plan->variables[begin + k].variable, sizeof(THPVariable));
    if (!from_params) prefetch_bytes(items[begin + k], 48);
  }
  for (Py_ssize_t k = 0; k < m; ++k) {
    variables[k] = impl_of(plan->variables[begin + k].variable);
    if (variables[k] != nullptr) prefetch_bytes(variables[k], sizeof(c10::TensorImpl));
    grad_objects[k] = nullptr;
    if (!from_params && PyTuple_CheckExact(items[begin + k]) && PyTuple_GET_SIZE(items[begin + k]) == 2) {
      grad_objects[k] = PyTuple_GET_ITEM(items[begin + k], 0);
      prefetch_bytes(grad_objects[k], sizeof(THPVariable));
    }
  }
  for (Py_ssize_t k = 0; k < m; ++k) {
    const c10::TensorImpl* v = variables[k];
    grads[k] = nullptr;
    if (v != nullptr) {
      prefetch_bytes(v->unsafe_storage().unsafeGetStorageImpl(), sizeof(c10::StorageImpl));
    }
    if (grad_objects[k] != nullptr) {
      grads[k] = impl_of(grad_objects[k]);
      if (grads[k] != nullptr) prefetch_bytes(grads[k], sizeof(c10::TensorImpl));
    }
  }
  if (from_params) {
    for (Py_ssize_t k = 0; k < m; ++k) {
      const c10::TensorImpl* v = variables[k];
      const at::Tensor& grad = v != nullptr ? v->grad() : kUndefined;  // (TensorImpl::grad: public)
      grads[k] = grad.defined() ? grad.unsafeGetTensorImpl() : nullptr;
      if (grads[k] != nullptr) prefetch_bytes(grads[k], sizeof(c10::TensorImpl));
      if (static_cast<size_t>(begin + k) < plan->pairs.size() && plan->pairs[begin + k] != nullptr)
        prefetch_bytes(plan->pairs[begin + k], 48, true);
    }
  }
  for (Py_ssize_t k = 0; k < m; ++k) {
    const c10::TensorImpl* g = grads[k];
    if (g == nullptr) continue;
    prefetch_bytes(g->unsafe_storage().unsafeGetStorageImpl(), sizeof(c10::StorageImpl));
  }
}

// The checks of StepPlan.fits over ``items``: the pairs of a step (2-tuples ``(gradient, variable)``), or, with
// ``from_params``, the parameters of a torch ``step()`` whose ``.grad`` are the gradients (read here, in the same
// pass; then the pairs are built too). Each item must hold exactly the plan's variable, in order, still
// contiguous at its recorded address; each gradient a dense torch.Tensor (exactly) with the recorded dtype,
// sizes and device. Returns None (not ordinary), or ``(gradients, their addresses as bytes of uint64 or None
// when one is not contiguous, constrained[, pairs])``, where ``constrained`` says whether a variable has a
// constraint (``engine/undo.py``; read in the same pass, its objects in cache): True, False, or None when
// reading one raised.
PyObject* check_step(Plan* plan, PyObject* sequence, bool from_params) {
  if (!PyList_Check(sequence) && !PyTuple_Check(sequence)) Py_RETURN_NONE;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
  if (n != static_cast<Py_ssize_t>(plan->variables.size())) Py_RETURN_NONE;
  PyObject** items = PySequence_Fast_ITEMS(sequence);
  PyObject* tensor_type = reinterpret_cast<PyObject*>(THPVariableClass);
  PyObject* grads = PyList_New(n);
  PyObject* pairs = from_params ? PyList_New(n) : nullptr;
  PyObject* addresses = PyBytes_FromStringAndSize(nullptr, n * static_cast<Py_ssize_t>(sizeof(uint64_t)));
  if (grads == nullptr || addresses == nullptr || (from_params && pairs == nullptr)) {
    Py_XDECREF(grads);
    Py_XDECREF(pairs);
    Py_XDECREF(addresses);
    return nullptr;
  }
  auto out = reinterpret_cast<uint64_t*>(PyBytes_AS_STRING(addresses));
  bool contiguous = true, ok = true;
  // First whether a variable has a constraint: reading an attribute may run Python code (a property, a
  // ``__getattr__``), which might change the tensors or the sequence, so it runs before any of them is checked;
  // each variable is held while it is read, and the sequence is read again after each one.
  int constrained = 0;  // 1: a variable has a constraint; -1: undecided (reading one raised, or the step changed)
  for (Py_ssize_t i = 0; i < n && constrained == 0; ++i) {
    if (i % kBlock == 0) warm_attributes(plan, i, std::min(kBlock, n - i));
    PyObject* item = items[i];
    PyObject* variable = from_params ? item
                         : PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2 ? PyTuple_GET_ITEM(item, 1)
                                                                                   : nullptr;
    if (variable != plan->variables[i].variable) break;  // (not this plan's step: refused below)
    Py_INCREF(variable);
    constrained = has_constraint(variable);
    Py_DECREF(variable);
    if (PySequence_Fast_GET_SIZE(sequence) != n) constrained = -1, ok = false;
    items = PySequence_Fast_ITEMS(sequence);
  }
  std::vector<PyObject*> released;  // references to drop after the pass (recycled_pair)
  try {
    for (Py_ssize_t i = 0; i < n && ok; ++i) {
      if (i % kBlock == 0) warm_step(plan, items, i, std::min(kBlock, n - i), from_params);
      const Recorded& r = plan->variables[i];
      PyObject* item = items[i];
      PyObject* object;  // the gradient (a new reference when read from the parameter)
      if (from_params) {
        // Parameters of a plain type only: a subclass may define ``grad`` as a Python property.
        PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(item));
        if (item != r.variable || (type != tensor_type && type != parameter_type())) {
          ok = false;
          break;
        }
      } else if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 || PyTuple_GET_ITEM(item, 1) != r.variable) {
        ok = false;
        break;
      }
      // Everything the kernels will rely on, proven again on every step (a plan caches work, never trust): the
      // variable's address, dtype, device, sizes, contiguity, storage bounds and kind. ``p.data = ...`` may give
      // a tensor of another size at the same address (the allocator reuses it), ``resize_``/``set_``/a dtype view
      // change the sizes or dtype in place: any difference takes the full path, which refuses it clearly.
      const at::Tensor* v = dense(r.variable);
      if (v == nullptr || v->const_data_ptr() != r.address || v->scalar_type() != r.dtype ||
          v->device() != r.device || v->sizes() != c10::IntArrayRef(r.sizes) || !v->is_contiguous() ||
          !in_storage(*v) || !writable(*v)) {
        ok = false;
        break;
      }
      if (from_params) {
        // The ``.grad`` autograd keeps for a leaf, read from its metadata (what ``Tensor::grad()`` returns, without
        // its warning checks for non-leaf tensors: a parameter of a plan is a leaf, or has no gradient here).
        const at::Tensor& grad = v->unsafeGetTensorImpl()->grad();  // (TensorImpl::grad: public, no warning)
        if (!grad.defined()) {
          ok = false;
          break;
        }
        object = THPVariable_Wrap(grad);
        if (object == nullptr) throw std::runtime_error("wrapping a gradient failed");
      } else {
        object = PyTuple_GET_ITEM(item, 0);
        Py_INCREF(object);
      }
      PyList_SET_ITEM(grads, i, object);  // (owned by the list from here on)
      if (reinterpret_cast<PyObject*>(Py_TYPE(object)) != tensor_type) {
        ok = false;
        break;
      }
      const at::Tensor* g = dense(object);
      if (g == nullptr || g->scalar_type() != r.dtype || g->sizes() != c10::IntArrayRef(r.sizes) ||
          (plan->on_cpu ? !g->is_cpu() : g->device() != r.device)) {
        ok = false;
        break;
      }
      if (contiguous && g->is_contiguous() && in_storage(*g)) {
        out[i] = reinterpret_cast<uint64_t>(g->const_data_ptr());
      } else {
        contiguous = false;  // (a gradient read by address must lie inside its storage; else torch reads it)
      }
      if (from_params) {
        PyObject* pair = recycled_pair(plan, static_cast<size_t>(i), object, item, released);
        if (pair == nullptr) throw std::runtime_error("building a pair failed");
        PyList_SET_ITEM(pairs, i, pair);
      }
    }
  } catch (const std::exception&) {
    ok = false;
  }
  for (PyObject* object : released) Py_DECREF(object);
  if (!ok) {
    PyErr_Clear();  // (a failed allocation above: the Python path decides)
    Py_DECREF(grads);  // (unset items are NULL, which list deallocation skips)
    Py_XDECREF(pairs);
    Py_DECREF(addresses);
    Py_RETURN_NONE;
  }
  if (!contiguous) {
    Py_DECREF(addresses);
    addresses = Py_None;
    Py_INCREF(Py_None);
  }
  PyObject* verdict = constrained < 0 ? Py_None : constrained ? Py_True : Py_False;  // (borrowed; Pack takes its own)
  PyObject* result = from_params ? PyTuple_Pack(4, grads, addresses, verdict, pairs)
                                 : PyTuple_Pack(3, grads, addresses, verdict);
  Py_DECREF(grads);
  Py_DECREF(addresses);
  Py_XDECREF(pairs);
  return result;
}

// fits(plan, pairs) -> None or (gradients, addresses, constrained): check_step over the pairs of a step.
PyObject* fits(PyObject*, PyObject* args) {
  PyObject *capsule, *pairs;
  if (!PyArg_ParseTuple(args, "OO", &capsule, &pairs)) return nullptr;
  auto plan = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
  if (plan == nullptr) return nullptr;
  return check_step(plan, pairs, false);
}

// fits_params(plan, params) -> None or (gradients, addresses, constrained, pairs): check_step over the parameters of a
// torch ``step()``, reading their ``.grad`` in the same pass.
PyObject* fits_params(PyObject*, PyObject* args) {
  PyObject *capsule, *params;
  if (!PyArg_ParseTuple(args, "OO", &capsule, &params)) return nullptr;
  auto plan = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
  if (plan == nullptr) return nullptr;
  if (parameter_type() == nullptr) return nullptr;
  return check_step(plan, params, true);
}

// Moves the version counter of each of the ``n`` tensor objects at ``items`` (all tensors), in blocks whose
// counters are requested first (``warm``). Throws where torch would refuse the in-place write (an inference
// tensor outside inference mode).
void bump_all(PyObject** items, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (i % kBlock == 0) warm(std::min(kBlock, n - i), [&](Py_ssize_t k) { return items[i + k]; }, kVersion);
    THPVariable_Unpack(items[i]).unsafeGetTensorImpl()->bump_version();
  }
}

// same_tensors(record, tensors, bump=False) -> bool: ``tensors`` (a list or tuple) are the tensors ``record`` (a
// ``make_plan`` of them) recorded, each still the same object with the same address, dtype, device and sizes,
// contiguous, inside its storage, of a kind read directly and writable now, as StepPlan.state_operands requires
// (a slot resized or re-typed in place, or swapped for one at the same address, is read again in full). With
// ``bump``, when they are, each one's version counter moves too (the tensors are about to be written, as torch
// bumps a tensor before its in-place kernel runs): one pass over the tensors instead of two.
PyObject* same_tensors(PyObject*, PyObject* args) {
  PyObject *capsule, *tensors;
  int bump = 0;
  if (!PyArg_ParseTuple(args, "OO|p", &capsule, &tensors, &bump)) return nullptr;
  auto record = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
  if (record == nullptr) return nullptr;
  bool ok = PyList_Check(tensors) || PyTuple_Check(tensors);
  Py_ssize_t n = ok ? PySequence_Fast_GET_SIZE(tensors) : 0;
  ok = ok && n == static_cast<Py_ssize_t>(record->variables.size());
  try {
    PyObject** items = ok ? PySequence_Fast_ITEMS(tensors) : nullptr;
    for (Py_ssize_t i = 0; i < n && ok; ++i) {
      if (i % kBlock == 0)
        warm(std::min(kBlock, n - i), [&](Py_ssize_t k) { return items[i + k]; }, kStorage);
      const Recorded& r = record->variables[i];
      const at::Tensor* t = items[i] == r.variable ? dense(items[i]) : nullptr;
      ok = t != nullptr && t->const_data_ptr() == r.address && t->scalar_type() == r.dtype &&
           t->device() == r.device && t->sizes() == c10::IntArrayRef(r.sizes) && t->is_contiguous() &&
           in_storage(*t) && writable(*t);
    }
    if (ok && bump) {  // (all checked first: a refused list bumps nothing)
      bump_all(PySequence_Fast_ITEMS(tensors), n);
    }
  } catch (const std::exception& error) {
    if (bump && ok) {  // (writable was checked: torch refused the bump for another reason, reported as such)
      PyErr_SetString(PyExc_RuntimeError, error.what());
      return nullptr;
    }
    ok = false;
  }
  return PyBool_FromLong(ok);
}

// readable(tensors, written) -> bool: every tensor (a list or tuple) a kernel may take by address: a tensor read
// directly (``dense``: no wrapper subclass, functional, nested or lazily negated tensor), contiguous, inside its
// storage, and (when ``written``) writable now. What ``native.apply`` requires of an operand list it reads itself.
PyObject* readable(PyObject*, PyObject* args) {
  PyObject* tensors;
  int written = 0;
  if (!PyArg_ParseTuple(args, "O|p", &tensors, &written)) return nullptr;
  if (!PyList_Check(tensors) && !PyTuple_Check(tensors)) Py_RETURN_FALSE;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(tensors);
  PyObject** items = PySequence_Fast_ITEMS(tensors);
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      const at::Tensor* t = dense(items[i]);
      if (t == nullptr || !t->is_contiguous() || !in_storage(*t) || (written && !writable(*t))) Py_RETURN_FALSE;
    }
  } catch (const std::exception&) {
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// bump_versions(tensors): each tensor's version counter moves, as after an in-place torch op, so that autograd
// still detects a tensor modified after it was saved for a backward pass. Raises (having bumped none) where
// torch would refuse the in-place op: an inference tensor outside inference mode.
PyObject* bump_versions(PyObject*, PyObject* tensors) {
  if (!PyList_Check(tensors) && !PyTuple_Check(tensors)) {
    PyErr_SetString(PyExc_TypeError, "bump_versions takes a list of tensors");
    return nullptr;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(tensors);
  PyObject** items = PySequence_Fast_ITEMS(tensors);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!is_tensor_object(items[i])) {
      PyErr_Format(PyExc_TypeError, "bump_versions: entry %zd is not a tensor", i);
      return nullptr;
    }
  }
  try {
    bump_all(items, n);
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

// A 0-d (or one-element) CPU tensor whose single element may be read or written here: a plain dense tensor
// (``dense``) of ``type`` that autograd does not track.
inline const at::Tensor* cpu_scalar(PyObject* object, c10::ScalarType type) {
  const at::Tensor* t = dense(object);
  if (t == nullptr || !t->is_cpu() || t->scalar_type() != type || t->numel() != 1 || t->requires_grad() ||
      !in_storage(*t))
    return nullptr;
  return t;
}

// -1 when every one of the n elements of ``x`` is in [0, rows), else the position of the first that is not.
template <typename Index>
int64_t first_outside(const Index* x, int64_t n, long long rows) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] < 0 || static_cast<long long>(x[i]) >= rows) return i;
  return -1;
}

// first_outside over the indices in ``t`` (contiguous, on the CPU); -2 when they are neither int64 nor int32.
int64_t first_index_outside(const at::Tensor& t, long long rows) {
  if (t.scalar_type() == c10::kLong) return first_outside(t.const_data_ptr<int64_t>(), t.numel(), rows);
  if (t.scalar_type() == c10::kInt) return first_outside(t.const_data_ptr<int32_t>(), t.numel(), rows);
  return -2;
}

// Whether ``shape`` (a tuple or list of Python ints, e.g. torch.Size) equals ``sizes``: 1 yes, 0 no, -1 when this
// cannot tell (another kind of sequence or number: the caller compares in Python).
int same_shape(PyObject* shape, c10::IntArrayRef sizes) {
  if (!PyTuple_Check(shape) && !PyList_Check(shape)) return -1;
  const Py_ssize_t dims = PySequence_Fast_GET_SIZE(shape);
  if (dims != static_cast<Py_ssize_t>(sizes.size())) return 0;
  PyObject** items = PySequence_Fast_ITEMS(shape);
  for (Py_ssize_t d = 0; d < dims; ++d) {
    if (!PyLong_CheckExact(items[d])) return -1;
    int overflow = 0;
    const long long size = PyLong_AsLongLongAndOverflow(items[d], &overflow);
    if (overflow != 0) return -1;
    if (size != sizes[d]) return 0;
  }
  return 1;
}

// first_out_of_range(indices, rows) -> -1 when every element of ``indices`` (a dense contiguous CPU int64 or
// int32 tensor of any shape) is in [0, rows), else the flat position of the first that is not; None when the
// tensor is of another kind (the caller checks with torch). One read of the indices, no tensor made: the
// range check of sparse gradients (kernels/rows.py) on every step.
PyObject* first_out_of_range(PyObject*, PyObject* args) {
  PyObject* object;
  long long rows;
  if (!PyArg_ParseTuple(args, "OL", &object, &rows)) return nullptr;
  const at::Tensor* t = dense(object);
  if (t == nullptr || !t->is_cpu() || !t->is_contiguous() || !in_storage(*t)) Py_RETURN_NONE;
  const int64_t bad = first_index_outside(*t, rows);
  if (bad == -2) Py_RETURN_NONE;
  return PyLong_FromLongLong(bad);
}

// slices_fit(values, indices, dense_shape, variable) -> True when slices with these parts fit ``variable`` as
// ``OptimizerCore._check_gradient`` requires (rows of the variable's row shape, floating values (of the variable's
// dtype for a complex one) on its device, integer indices all inside the table, a dense shape that is None or the
// variable's), read in one call; None when this cannot tell (anything
// else: the Python checks then decide, and raise where they must). Never False: a refusal is Python's to word.
PyObject* slices_fit(PyObject*, PyObject* args) {
  PyObject *values_object, *indices_object, *shape_object, *variable_object;
  if (!PyArg_ParseTuple(args, "OOOO", &values_object, &indices_object, &shape_object, &variable_object))
    return nullptr;
  const at::Tensor* variable = dense(variable_object);
  const at::Tensor* values = dense(values_object);
  const at::Tensor* indices = dense(indices_object);
  if (variable == nullptr || values == nullptr || indices == nullptr) Py_RETURN_NONE;
  try {
    if (variable->dim() == 0 || values->dim() == 0 || values->sizes().slice(1) != variable->sizes().slice(1)) Py_RETURN_NONE;
    // Real variables take floating values (of any float dtype: cast later), complex ones values of their dtype.
    auto real = [](c10::ScalarType t) {
      return t == c10::kHalf || t == c10::kBFloat16 || t == c10::kFloat || t == c10::kDouble;
    };
    const c10::ScalarType type = variable->scalar_type();
    const bool complex = type == c10::kComplexFloat || type == c10::kComplexDouble;
    if (!(complex ? values->scalar_type() == type : real(type) && real(values->scalar_type()))) Py_RETURN_NONE;
    if (values->device() != variable->device()) Py_RETURN_NONE;
    if (!indices->is_cpu() || !indices->is_contiguous() || !in_storage(*indices)) Py_RETURN_NONE;
    if (values->size(0) != indices->numel()) Py_RETURN_NONE;  // one row of values per index
    if (first_index_outside(*indices, variable->size(0)) != -1) Py_RETURN_NONE;
    if (shape_object != Py_None && same_shape(shape_object, variable->sizes()) != 1) Py_RETURN_NONE;
  } catch (const std::exception&) {
    Py_RETURN_NONE;
  }
  Py_RETURN_TRUE;
}

// same_kind(variable, dtype, device, shape) -> True when the variable still has this torch.dtype, torch.device
// and shape (a tuple of ints, e.g. torch.Size), False when it surely has not, None when this cannot tell (the
// caller compares in Python). What the optimizer recorded when it built a variable's state is checked on every
// step (``OptimizerCore._check_variables_unchanged``).
PyObject* same_kind(PyObject*, PyObject* args) {
  PyObject *variable_object, *dtype_object, *device_object, *shape_object;
  if (!PyArg_ParseTuple(args, "OOOO", &variable_object, &dtype_object, &device_object, &shape_object))
    return nullptr;
  if (!is_tensor_object(variable_object) || !THPDtype_Check(dtype_object) || !THPDevice_Check(device_object) ||
      !PyTuple_Check(shape_object))  // (the recorded torch.Size)
    Py_RETURN_NONE;
  try {
    const at::Tensor& t = THPVariable_Unpack(variable_object);
    if (!t.defined() || t.is_nested() || t.unsafeGetTensorImpl()->is_python_dispatch()) Py_RETURN_NONE;
    if (t.scalar_type() != reinterpret_cast<THPDtype*>(dtype_object)->scalar_type ||
        t.device() != reinterpret_cast<THPDevice*>(device_object)->device)
      Py_RETURN_FALSE;
    const int same = same_shape(shape_object, t.sizes());
    if (same == -1) Py_RETURN_NONE;
    return PyBool_FromLong(same);
  } catch (const std::exception&) {
    Py_RETURN_NONE;
  }
}

// scalar(tensor) -> the value of a one-element float32 or float64 CPU tensor as a Python float (exact), or None
// for anything else (the caller asks torch). A learning rate is read on every step: this costs no dispatch.
PyObject* scalar(PyObject*, PyObject* object) {
  const at::Tensor* t = dense(object);
  if (t == nullptr || !t->is_cpu() || t->numel() != 1 || !in_storage(*t)) Py_RETURN_NONE;
  if (t->scalar_type() == c10::kFloat) return PyFloat_FromDouble(*t->const_data_ptr<float>());
  if (t->scalar_type() == c10::kDouble) return PyFloat_FromDouble(*t->const_data_ptr<double>());
  Py_RETURN_NONE;
}

// increment(tensor) -> True after ``tensor += 1`` for a one-element int64 CPU tensor that autograd does not
// track (its version counter moves first, as torch's in-place add would move it), else False with nothing done
// (the caller runs torch's ``add_``, which also raises what torch raises: an inference tensor outside inference
// mode). The iteration counter moves on every step.
PyObject* increment(PyObject*, PyObject* object) {
  const at::Tensor* t = cpu_scalar(object, c10::kLong);
  if (t == nullptr || t->is_inference()) Py_RETURN_FALSE;
  try {
    t->unsafeGetTensorImpl()->bump_version();  // (throws for an inference tensor)
  } catch (const std::exception&) {
    Py_RETURN_FALSE;
  }
  ++*static_cast<int64_t*>(t->unsafeGetTensorImpl()->mutable_data());
  Py_RETURN_TRUE;
}

// The signature of the compiled rules on slices (rules.inc, SLICE_RULE): -1 when the rule ran, else the position
// of the first index outside [0, rows), with nothing written.
using SliceRule = int64_t (*)(int64_t rows, int64_t width, int64_t k, const int64_t* indices, const void* values,
                              void* param, void* state, const double* scalars);

// slices(rule, param, indices, values, state, scalars) -> -1 (done), the position of the first bad index
// (nothing written), or None when the call is not taken here (the caller's Python path decides; it takes
// everything this refuses). ``rule`` is the address of one compiled rule of the library, for ``param``'s dtype
// (``dtype`` below is its scalar type); ``state`` is a tensor or None; ``scalars`` a tuple of floats (at most 4).
// The operand checks of ``native.apply_slices`` in one pass: every tensor a plain dense contiguous CPU tensor,
// ``values`` and ``state`` of ``param``'s dtype, ``values`` shaped (k, *param.shape[1:]), ``state`` shaped like
// ``param``, ``indices`` int64 of k elements, and no tensor autograd would see changed. The written tensors'
// version counters move after the rule ran, as torch's in-place ops move them.
PyObject* slices(PyObject*, PyObject* args) {
  unsigned long long address;
  int dtype_code;
  PyObject *param_object, *indices_object, *values_object, *state_object, *scalar_tuple;
  if (!PyArg_ParseTuple(args, "KiOOOOO!", &address, &dtype_code, &param_object, &indices_object, &values_object,
                        &state_object, &PyTuple_Type, &scalar_tuple))
    return nullptr;
  if (address == 0) Py_RETURN_NONE;
  const auto dtype = static_cast<c10::ScalarType>(dtype_code);
  const at::Tensor* param = dense(param_object);
  const at::Tensor* indices = dense(indices_object);
  const at::Tensor* values = dense(values_object);
  const at::Tensor* state = state_object == Py_None ? nullptr : dense(state_object);
  if (param == nullptr || indices == nullptr || values == nullptr || (state_object != Py_None && state == nullptr))
    Py_RETURN_NONE;
  double scalars[4];
  Py_ssize_t count = PyTuple_GET_SIZE(scalar_tuple);
  if (count > 4) Py_RETURN_NONE;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PyTuple_GET_ITEM(scalar_tuple, i);
    if (!PyFloat_CheckExact(item)) Py_RETURN_NONE;
    scalars[i] = PyFloat_AS_DOUBLE(item);
  }
  try {
    const bool grad_mode = at::GradMode::is_enabled();
    auto plain = [&](const at::Tensor* t) {
      return t->is_cpu() && t->is_contiguous() && in_storage(*t) && !t->is_inference() &&
             !(grad_mode && t->requires_grad());
    };
    if (!plain(param) || !plain(indices) || !plain(values) || (state != nullptr && !plain(state))) Py_RETURN_NONE;
    if (param->scalar_type() != dtype || values->scalar_type() != dtype || indices->scalar_type() != c10::kLong ||
        (state != nullptr && state->scalar_type() != dtype))
      Py_RETURN_NONE;
    const int64_t dims = param->dim();
    if (dims == 0 || values->dim() != dims || indices->dim() != 1) Py_RETURN_NONE;
    const int64_t k = values->size(0), rows = param->size(0);
    if (indices->size(0) != k || values->sizes().slice(1) != param->sizes().slice(1) ||
        (state != nullptr && state->sizes() != param->sizes()))
      Py_RETURN_NONE;
    const int64_t width = rows ? param->numel() / rows : 0;
    const int64_t* index_data = indices->const_data_ptr<int64_t>();
    const void* value_data = values->const_data_ptr();
    void* param_data = param->unsafeGetTensorImpl()->mutable_data();
    void* state_data = state != nullptr ? state->unsafeGetTensorImpl()->mutable_data() : nullptr;
    int64_t bad;
    Py_BEGIN_ALLOW_THREADS  // (as ctypes does: the arguments' references keep the tensors alive meanwhile)
    bad = reinterpret_cast<SliceRule>(address)(rows, width, k, index_data, value_data, param_data, state_data,
                                               scalars);
    Py_END_ALLOW_THREADS
    if (bad == -1) {
      param->unsafeGetTensorImpl()->bump_version();
      if (state != nullptr) state->unsafeGetTensorImpl()->bump_version();
    }
    return PyLong_FromLongLong(bad);
  } catch (const std::exception&) {
    Py_RETURN_NONE;
  }
}

#if defined(__SSE__)
// What a step sets on its thread (engine/pipeline.py): autograd off, as ``torch.no_grad()``, and subnormals flushed
// to zero, as TensorFlow's kernels run (numerics/fpmode.py; MXCSR flush-to-zero | denormals-are-zero). In two
// calls instead of four through torch's bindings and ctypes.
constexpr unsigned kDenormalBits = 0x8040u;

// enter_step() -> a token for leave_step: the previous grad mode (bit 0) and denormal bits.
PyObject* enter_step(PyObject*, PyObject*) {
  long token = at::GradMode::is_enabled() ? 1 : 0;
  at::GradMode::set_enabled(false);
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kDenormalBits);
  token |= static_cast<long>(csr & kDenormalBits);
  return PyLong_FromLong(token);
}

// leave_step(token): puts back what enter_step found.
PyObject* leave_step(PyObject*, PyObject* token_object) {
  const long token = PyLong_AsLong(token_object);
  if (token == -1 && PyErr_Occurred()) return nullptr;
  _mm_setcsr((_mm_getcsr() & ~kDenormalBits) | (static_cast<unsigned>(token) & kDenormalBits));
  at::GradMode::set_enabled((token & 1) != 0);
  Py_RETURN_NONE;
}
#endif

// gradients(params) -> [(p.grad, p) for p in params if p.grad is not None], reading each ``.grad`` in C++ for
// plain tensors and parameters (a subclass, whose ``grad`` a Python property may define, goes through getattr).
PyObject* gradients(PyObject*, PyObject* params) {
  if (!PyList_CheckExact(params)) {
    PyErr_SetString(PyExc_TypeError, "gradients takes a list of parameters");
    return nullptr;
  }
  Py_ssize_t n = PyList_GET_SIZE(params);
  PyObject* out = PyList_New(0);
  if (out == nullptr) return nullptr;
  PyObject* tensor_type = reinterpret_cast<PyObject*>(THPVariableClass);
  PyObject* parameter = parameter_type();
  if (parameter == nullptr) {
    Py_DECREF(out);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* p = PyList_GET_ITEM(params, i);
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(p));
    PyObject* grad;
    if (type == tensor_type || type == parameter) {
      const at::Tensor& t = THPVariable_Unpack(p);
      const at::Tensor& g = t.grad();
      if (!g.defined()) continue;
      grad = THPVariable_Wrap(g);
    } else {
      grad = PyObject_GetAttrString(p, "grad");
    }
    if (grad == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    if (grad == Py_None) {
      Py_DECREF(grad);
      continue;
    }
    PyObject* pair = PyTuple_Pack(2, grad, p);
    Py_DECREF(grad);
    if (pair == nullptr || PyList_Append(out, pair) != 0) {
      Py_XDECREF(pair);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(pair);
  }
  return out;
}

PyMethodDef methods[] = {
    {"make_plan", make_plan, METH_O, "The recorded variables of a step plan (a capsule), or None."},
    {"fits", fits, METH_VARARGS, "The gradients of an ordinary step of the plan and their addresses, or None."},
    {"fits_params", fits_params, METH_VARARGS, "fits for the .grad of parameters, with the pairs, or None."},
    {"same_tensors", same_tensors, METH_VARARGS, "Whether tensors are the recorded ones, unchanged."},
    {"readable", readable, METH_VARARGS, "Whether every tensor may be taken by address (and written)."},
    {"bump_versions", bump_versions, METH_O, "Moves each tensor's version counter (an in-place write)."},
    {"gradients", gradients, METH_O, "The (grad, param) pairs of the parameters that have a gradient."},
    {"first_out_of_range", first_out_of_range, METH_VARARGS, "The first index outside [0, rows), or -1."},
    {"scalar", scalar, METH_O, "The value of a one-element float32/float64 CPU tensor, or None."},
    {"same_kind", same_kind, METH_VARARGS, "Whether a tensor has this dtype, device and shape (None: undecided)."},
#if defined(__SSE__)
    {"enter_step", enter_step, METH_NOARGS, "Autograd off and subnormals flushed on this thread; a token."},
    {"leave_step", leave_step, METH_O, "Puts back what enter_step found."},
#endif
    {"slices_fit", slices_fit, METH_VARARGS, "Whether slices fit a variable (True), or None: undecided."},
    {"slices", slices, METH_VARARGS, "A compiled rule on slices, its operands checked here; or None."},
    {"increment", increment, METH_O, "Adds 1 to a one-element int64 CPU tensor in place; False if not taken."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tensor_table", "slotopt's per-step tensor checks in C++.", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__tensor_table(void) {
  PyObject* m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddStringConstant(m, "torch_version", SLOTOPT_TORCH_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
