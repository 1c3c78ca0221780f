// slotopt's tensor table, its per-tensor part: the checks and calls of a step on single tensors (index ranges,
// slices fitting a variable, a variable's kind, one-element scalars and counters), the compiled rules on slices
// with their operands checked, and the thread's step mode. The step plans and the module's method table are in
// tensor_table.cpp; what both read of a tensor object is in tensor_table.h.

#include "tensor_table.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace slotopt_tensor_table {
namespace {

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

}  // namespace

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
// ``engine/proof/validation.py``'s ``check_gradient`` requires (rows of the variable's row shape, floating values (of
// the variable's dtype for a complex one) on its device, integer indices all inside the table, a dense shape that is
// None or the variable's), read in one call; None when this cannot tell (anything
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
// step (``engine/proof/unchanged.py``'s ``check_variables_unchanged``).
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
    // The storages held while the rule runs without the GIL: the arguments' references keep the tensor objects
    // alive, not their storages (another thread's ``param.data = ...`` lets go of the old one).
    const c10::Storage held[] = {param->storage(), indices->storage(), values->storage(),
                                 state != nullptr ? state->storage() : c10::Storage()};
    (void)held;
    int64_t bad;
    Py_BEGIN_ALLOW_THREADS
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

// What a kernel running without the GIL holds of its operands (``pin``): a strong reference to each storage it
// reads or writes. Another Python thread may meanwhile run ``p.data = ...``, ``p.grad = None`` or drop a slot: the
// tensor then lets go of its storage, and without this reference the kernel would write into freed memory. (A
// reference cannot stop a storage being resized in place, ``untyped_storage().resize_(0)``: torch.optim's ops have
// the same limit; docs/architecture.md.)
struct Pins {
  std::vector<c10::Storage> storages;
};

const char* kPinsCapsule = "slotopt.tensor_table.Pins";

void free_pins(PyObject* capsule) {
  delete static_cast<Pins*>(PyCapsule_GetPointer(capsule, kPinsCapsule));
}

namespace {

// Whether the storage of the tensor object ``object`` holds the ``bytes`` bytes from ``start``; if so, that storage
// is held in ``pins``. A tensor not read directly (``dense``) holds nothing here: refused.
bool pin_range(PyObject* object, uint64_t start, uint64_t bytes, Pins& pins) {
  const at::Tensor* t = dense(object);
  if (t == nullptr) return false;
  const c10::Storage& storage = t->storage();
  if (bytes != 0) {
    const auto base = reinterpret_cast<uint64_t>(storage.data());
    const uint64_t size = storage.nbytes();
    if (base == 0 || start < base || start - base > size || bytes > size - (start - base)) return false;
  }
  pins.storages.push_back(storage);  // (an atomic increment of the storage's count; dropped by free_pins)
  return true;
}

// Requests, level by level, the objects, TensorImpls and StorageImpls of ``m`` tensor objects, whose storages
// ``pin_range`` then reads and counts: their misses overlap instead of coming one by one (as tensor_table.cpp's
// ``warm``; prefetches are hints, which never fault).
constexpr Py_ssize_t kPinBlock = 16;

void warm_storages(PyObject** objects, Py_ssize_t m) {
  const c10::TensorImpl* impls[kPinBlock];
  for (Py_ssize_t k = 0; k < m; ++k) __builtin_prefetch(objects[k]);
  for (Py_ssize_t k = 0; k < m; ++k) {
    impls[k] = is_tensor_object(objects[k]) ? THPVariable_Unpack(objects[k]).unsafeGetTensorImpl() : nullptr;
    if (impls[k] != nullptr) {
      __builtin_prefetch(impls[k]);
      __builtin_prefetch(reinterpret_cast<const char*>(impls[k]) + 64);
    }
  }
  for (Py_ssize_t k = 0; k < m; ++k)
    if (impls[k] != nullptr) __builtin_prefetch(impls[k]->unsafe_storage().unsafeGetStorageImpl(), 1);
}

}  // namespace

// pin(rows, table, offsets, n, itemsize) -> a capsule holding every operand's storage, or None when an address
// of ``table`` does not lie, with its elements, inside the storage its tensor has now (nothing held then: the
// caller takes another path). ``table``: the address of a uint64 array [len(rows)][n] of the addresses a kernel
// will take; ``offsets``: of an int64 array [n + 1], the prefix sums of the tensors' element counts; ``rows``: per
// row of the table None (not read), a list or tuple of n tensors (entry i covers (offsets[i+1] - offsets[i]) *
// itemsize bytes from table[row][i]), or one tensor holding the whole row back to back (offsets[n] * itemsize
// bytes from table[row][0]). Read and held under the GIL in one call: the addresses proven here stay valid until
// the capsule is dropped, whatever other threads do to the tensors meanwhile.
PyObject* pin(PyObject*, PyObject* args) {
  PyObject* rows;
  unsigned long long table_address, offsets_address;
  Py_ssize_t n;
  long long itemsize;
  if (!PyArg_ParseTuple(args, "OKKnL", &rows, &table_address, &offsets_address, &n, &itemsize)) return nullptr;
  if ((!PyList_Check(rows) && !PyTuple_Check(rows)) || n < 0 || itemsize <= 0 || table_address == 0 ||
      offsets_address == 0)
    Py_RETURN_NONE;
  const auto* table = reinterpret_cast<const uint64_t*>(table_address);
  const auto* offsets = reinterpret_cast<const int64_t*>(offsets_address);
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(rows);
  PyObject** row_items = PySequence_Fast_ITEMS(rows);
  auto pins = new Pins();
  try {
    pins->storages.reserve(static_cast<size_t>(count * n));
    for (Py_ssize_t j = 0; j < count; ++j) {
      PyObject* row = row_items[j];
      const uint64_t* addresses = table + j * n;
      bool ok = true;
      if (row == Py_None) continue;
      if (PyList_Check(row) || PyTuple_Check(row)) {
        ok = PySequence_Fast_GET_SIZE(row) == n;
        PyObject** tensors = PySequence_Fast_ITEMS(row);
        for (Py_ssize_t i = 0; i < n && ok; ++i) {
          if (i % kPinBlock == 0) warm_storages(tensors + i, std::min(kPinBlock, n - i));
          const int64_t numel = offsets[i + 1] - offsets[i];
          ok = numel >= 0 && pin_range(tensors[i], addresses[i], static_cast<uint64_t>(numel * itemsize), *pins);
        }
      } else {
        ok = n == 0 || (offsets[n] >= 0 &&
                        pin_range(row, addresses[0], static_cast<uint64_t>(offsets[n] * itemsize), *pins));
      }
      if (!ok) {
        delete pins;
        Py_RETURN_NONE;
      }
    }
  } catch (const std::exception&) {
    delete pins;
    Py_RETURN_NONE;
  }
  PyObject* capsule = PyCapsule_New(pins, kPinsCapsule, free_pins);
  if (capsule == nullptr) delete pins;
  return capsule;
}

// still(plan, pairs, grads, addresses) -> True when the pairs of an ordinary step that ``fits`` proved at the step's
// start are still exactly that (engine/proof/unchanged.py's ``proven_again``, just before the first write): each item the
// same 2-tuple of ``grads[i]`` and the plan's variable, the variable of its recorded address, dtype, device and sizes,
// contiguous, inside its storage and writable, the gradient an exact dense torch.Tensor of the variable's dtype,
// sizes and device, and, where ``addresses`` (the address of a uint64 array of one address per gradient, or 0: some
// gradient was not contiguous) is given, contiguous at that address inside its storage. False: not proven (the
// caller runs ``fits`` again). Everything ``fits`` checks of the tensors, without what it builds (the gradients'
// list, their addresses, the pairs) or reads besides (whether a variable has a constraint, unused here): a tuple
// cannot change, so the same gradient objects are the same operands.
PyObject* still(PyObject*, PyObject* args) {
  PyObject *capsule, *pairs, *grads;
  unsigned long long addresses_address;
  if (!PyArg_ParseTuple(args, "OOOK", &capsule, &pairs, &grads, &addresses_address)) return nullptr;
  auto plan = static_cast<Plan*>(PyCapsule_GetPointer(capsule, kPlanCapsule));
  if (plan == nullptr) return nullptr;
  if ((!PyList_Check(pairs) && !PyTuple_Check(pairs)) || (!PyList_Check(grads) && !PyTuple_Check(grads)))
    Py_RETURN_FALSE;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(pairs);
  if (n != static_cast<Py_ssize_t>(plan->variables.size()) || PySequence_Fast_GET_SIZE(grads) != n) Py_RETURN_FALSE;
  PyObject** items = PySequence_Fast_ITEMS(pairs);
  PyObject** grad_items = PySequence_Fast_ITEMS(grads);
  const auto* addresses = reinterpret_cast<const uint64_t*>(addresses_address);
  PyObject* tensor_type = reinterpret_cast<PyObject*>(THPVariableClass);
  try {
    for (Py_ssize_t i = 0; i < n; ++i) {
      const Recorded& r = plan->variables[i];
      PyObject* item = items[i];
      if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 || PyTuple_GET_ITEM(item, 1) != r.variable ||
          PyTuple_GET_ITEM(item, 0) != grad_items[i] ||
          reinterpret_cast<PyObject*>(Py_TYPE(grad_items[i])) != tensor_type)
        Py_RETURN_FALSE;
      if (!as_recorded(dense(r.variable), r)) Py_RETURN_FALSE;
      const at::Tensor* g = dense(grad_items[i]);
      if (!gradient_fits(g, r, plan->on_cpu)) Py_RETURN_FALSE;
      // (Without addresses the kernels read each gradient's contiguity and bounds themselves, native.apply.)
      if (addresses != nullptr && (!g->is_contiguous() || !in_storage(*g) ||
                                   reinterpret_cast<uint64_t>(g->const_data_ptr()) != addresses[i]))
        Py_RETURN_FALSE;
    }
  } catch (const std::exception&) {
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
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

}  // namespace slotopt_tensor_table
