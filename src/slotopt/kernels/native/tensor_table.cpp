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
//
// This file holds the step plans and the module's method table; tensor_checks.cpp the per-tensor checks and calls
// (tensor_table.h: what both read of a tensor object).

#include "tensor_table.h"

#ifndef SLOTOPT_TORCH_VERSION
#define SLOTOPT_TORCH_VERSION "unknown"
#endif

namespace slotopt_tensor_table {
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
// constraint (``engine/writing/undo.py``; read in the same pass, its objects in cache): True, False, or None when
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
      if (!as_recorded(v, r)) {
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
      if (!gradient_fits(g, r, plan->on_cpu)) {
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
      ok = as_recorded(t, r);
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
    {"still", still, METH_VARARGS, "Whether an ordinary step's pairs are still as fits proved them."},
    {"pin", pin, METH_VARARGS, "Every operand's storage held while a kernel runs without the GIL; or None."},
    {"slices", slices, METH_VARARGS, "A compiled rule on slices, its operands checked here; or None."},
    {"increment", increment, METH_O, "Adds 1 to a one-element int64 CPU tensor in place; False if not taken."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tensor_table", "slotopt's per-step tensor checks in C++.", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace slotopt_tensor_table

PyMODINIT_FUNC PyInit__tensor_table(void) {
  PyObject* m = PyModule_Create(&slotopt_tensor_table::module);
  if (m != nullptr && PyModule_AddStringConstant(m, "torch_version", SLOTOPT_TORCH_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
