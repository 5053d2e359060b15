// paddle-ext: the dispatch fast path's cache key, and the reshard fast path's request key, read
// straight from the DistTensors (and the target ProcessMesh and placements); and the reshard fast path's one-collective runners
// on gloo, each one native call on the group's GlooCommContext (AllGatherInto: S(0) -> R;
// AllReduceInto: P -> R; GatherTake: small S(0) -> S(j), an all_gather and the copy of this rank's
// block), with SoleOwner and FreeSlot to tell when an earlier output may be written again: no Paddle op runs
// between two collectives (paddle_ext/compat/ports/fast_tensor.py, NativeCall).
//
// Built by paddle_ext/compat/native/cpp_build.py (piece "fast_key": this file, then fast_route.cc -- the
// dispatcher's compiled entry and the module's table -- as one unit) against the installed Paddle's
// headers; loaded by paddle_ext/compat/native/fast_key.py (which documents the key's contents).
#include <Python.h>

#include <cstring>
#include <string>

#include "paddle/extension.h"
#include "paddle/phi/core/dense_tensor.h"
#include "paddle/phi/core/distributed/auto_parallel/dist_tensor.h"
#include "paddle/phi/core/distributed/auto_parallel/placement_types.h"
#include "paddle/phi/core/distributed/auto_parallel/process_mesh.h"
#include "paddle/phi/core/distributed/comm_context_manager.h"
#include "paddle/utils/pybind.h"

namespace phi {
namespace distributed {
// The wheel ships gloo_comm_context.h but not gloo's headers: declare the exported member.
class GlooCommContext : public CommContext {
 public:
  void AllReduce(phi::DenseTensor* out, const phi::DenseTensor& in, int reduce_type, uint32_t tag);
  void AllGather(phi::DenseTensor* out, const phi::DenseTensor& in, uint32_t tag);
};
}  // namespace distributed
}  // namespace phi

namespace {
using phi::distributed::DistTensor;
using phi::distributed::ProcessMesh;

// The attribute names read per call, as interned Python strings made once (PyObject_GetAttrString
// makes one per call).
PyObject* StopGradientName() {
  static PyObject* name = PyUnicode_InternFromString("stop_gradient");
  return name;
}

PyObject* GradName() {
  static PyObject* name = PyUnicode_InternFromString("grad");
  return name;
}

// The key's bytes are written into a buffer reused by the thread (a fresh std::string per call is a heap
// allocation: measured between two of Paddle's ops, it cost more than the key's reads); a nested use
// (a tensor getter that calls back into Python, and so into a key) gets a buffer of its own.
class ScratchKey {
 public:
  ScratchKey() : key_(busy_ ? &own_ : &shared_), nested_(busy_) {
    busy_ = true;
    key_->clear();
  }
  ~ScratchKey() {
    if (!nested_) busy_ = false;
  }
  ScratchKey(const ScratchKey&) = delete;
  ScratchKey& operator=(const ScratchKey&) = delete;
  std::string* get() { return key_; }
  py::bytes bytes() const { return py::bytes(key_->data(), key_->size()); }

 private:
  static thread_local std::string shared_;
  static thread_local bool busy_;
  std::string own_;
  std::string* key_;
  bool nested_;
};
thread_local std::string ScratchKey::shared_;
thread_local bool ScratchKey::busy_ = false;

inline void Put(std::string* key, int64_t v) { key->append(reinterpret_cast<const char*>(&v), sizeof v); }

template <typename V>
void PutInts(std::string* key, const V& values) {
  Put(key, static_cast<int64_t>(values.size()));
  for (auto v : values) Put(key, static_cast<int64_t>(v));
}

// A mesh's shape and process ids (what a plan reads of it).
void PutMeshRanks(std::string* key, const ProcessMesh& mesh) {
  PutInts(key, mesh.shape());
  PutInts(key, mesh.process_ids());
}

void PutMesh(std::string* key, const ProcessMesh& mesh) {
  PutMeshRanks(key, mesh);
  Put(key, static_cast<int64_t>(mesh.dim_names().size()));
  for (const auto& name : mesh.dim_names()) {
    Put(key, static_cast<int64_t>(name.size()));
    key->append(name);
  }
}

bool SameMesh(const ProcessMesh& a, const ProcessMesh& b) {
  return &a == &b ||
         (a.shape() == b.shape() && a.process_ids() == b.process_ids() && a.dim_names() == b.dim_names());
}

// Appends one placement; false for a kind this key does not know (the general path decides).
bool PutPlacement(std::string* key, const phi::distributed::Placement& p) {
  if (p.is_replicated()) {
    Put(key, 1);
  } else if (p.is_partial()) {
    Put(key, 2);
    Put(key, static_cast<int64_t>(static_cast<const phi::distributed::Partial&>(p).get_reduce_type()));
  } else if (p.is_shard()) {
    const auto& s = static_cast<const phi::distributed::Shard&>(p);
    Put(key, 3);
    Put(key, s.get_dim());
    Put(key, s.get_split_factor());
    Put(key, s.get_co_shard_order());
  } else {
    return false;
  }
  return true;
}

// The DistTensor behind a Python object, or nullptr (not a Tensor, or a dense one).
const DistTensor* DistOf(PyObject* obj) {
  if (!paddle::pybind::PyCheckTensor(obj)) return nullptr;
  phi::TensorBase* impl = reinterpret_cast<paddle::pybind::TensorObject*>(obj)->tensor.impl().get();
  return impl != nullptr && DistTensor::classof(impl) ? static_cast<const DistTensor*>(impl) : nullptr;
}

void PutDims(std::string* key, const phi::DDim& dims) {
  Put(key, dims.size());
  for (int k = 0; k < dims.size(); ++k) Put(key, dims[k]);
}

// Writes the key of a list or tuple of DistTensors on one mesh into `key` and sets `no_grad` (no input
// requires grad); false when there is no such key (a slot not a DistTensor, two meshes, an unknown
// placement kind).
bool BuildKey(PyObject* seq, std::string* key, bool* no_grad) {
  if (!PyList_Check(seq) && !PyTuple_Check(seq)) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  if (n == 0) return false;
  const ProcessMesh* first = nullptr;
  *no_grad = true;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* obj = items[i];
    const DistTensor* d = DistOf(obj);
    if (d == nullptr) return false;
    const ProcessMesh& mesh = d->process_mesh();
    if (first == nullptr) {
      first = &mesh;
      PutMesh(key, mesh);
    } else if (!SameMesh(*first, mesh)) {
      return false;
    }
    PutDims(key, d->dims());
    const auto& placements = d->placements();
    Put(key, static_cast<int64_t>(placements.size()));
    for (const auto& p : placements) {
      if (!p || !PutPlacement(key, *p)) return false;
    }
    PyObject* sg = PyObject_GetAttr(obj, StopGradientName());
    if (sg == nullptr) throw py::error_already_set();
    if (sg != Py_True) *no_grad = false;
    Py_DECREF(sg);
  }
  return true;
}

// (key bytes, no input requires grad) for a list or tuple of DistTensors on one mesh, else None.
py::object FastKey(py::handle slots) {
  ScratchKey scratch;
  bool no_grad = true;
  if (!BuildKey(slots.ptr(), scratch.get(), &no_grad)) return py::none();
  return py::make_tuple(scratch.bytes(), no_grad);
}

// Paddle's Python classes of the target half's objects (core.ProcessMesh, Shard, Partial, Replicate),
// set once by paddle_ext/compat/native/fast_key.py. The C++ object behind such an instance is read from
// pybind11's instance record (one bound base: the simple layout), not through pybind11's casts: the
// module does not share the wheel's pybind11 type registry, so a cast finds no type.
PyObject* g_mesh_type = nullptr;
PyObject* g_shard_type = nullptr;
PyObject* g_partial_type = nullptr;
PyObject* g_replicate_type = nullptr;

void SetTargetTypes(py::handle mesh, py::handle shard, py::handle partial, py::handle replicate) {
  for (PyObject** slot : {&g_mesh_type, &g_shard_type, &g_partial_type, &g_replicate_type}) Py_XDECREF(*slot);
  g_mesh_type = mesh.inc_ref().ptr();
  g_shard_type = shard.inc_ref().ptr();
  g_partial_type = partial.inc_ref().ptr();
  g_replicate_type = replicate.inc_ref().ptr();
}

// The C++ object of an instance of `type` (or of a Python subclass), or nullptr.
template <typename T>
const T* BoundValue(PyObject* obj, PyObject* type) {
  if (type == nullptr || !PyType_Check(type) || !PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(type)))
    return nullptr;
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  if (!inst->simple_layout) return nullptr;
  return static_cast<const T*>(inst->simple_value_holder[0]);   // nullptr before __init__; a reference's
                                                                 // (a tensor's own mesh) has no holder
}

const phi::distributed::Placement* PlacementOf(PyObject* obj) {
  if (const auto* s = BoundValue<phi::distributed::Shard>(obj, g_shard_type)) return s;
  if (const auto* p = BoundValue<phi::distributed::Partial>(obj, g_partial_type)) return p;
  return BoundValue<phi::distributed::Replicate>(obj, g_replicate_type);
}

// The target half of the reshard fast path's key: the mesh's shape and process ids, then the
// placements; false when `mesh` is not a ProcessMesh or a placement not Shard/Partial/Replicate.
bool PutTarget(std::string* key, py::handle mesh, py::handle placements) {
  PyObject* seq = placements.ptr();
  if (!PyList_Check(seq) && !PyTuple_Check(seq)) return false;
  const ProcessMesh* target = BoundValue<ProcessMesh>(mesh.ptr(), g_mesh_type);
  if (target == nullptr) return false;
  PutMeshRanks(key, *target);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  Put(key, static_cast<int64_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const phi::distributed::Placement* p = PlacementOf(items[i]);
    if (p == nullptr || !PutPlacement(key, *p)) return false;
  }
  return true;
}

// The target half alone (bytes, or None): fast_key.py checks it against the same facts read in Python
// before it uses reshard_key.
py::object TargetKey(py::handle mesh, py::handle placements) {
  std::string key;
  if (!PutTarget(&key, mesh, placements)) return py::none();
  return py::bytes(key);
}

// The reshard fast path's whole request key (paddle_ext/reshard/fast.py): the source DistTensor's mesh
// (shape and process ids; dim names are labels a plan does not read), global dims, dtype and
// placements; the target half (PutTarget); whether `x` stops the gradient. None when the target is not
// a ProcessMesh with Shard/Partial/Replicate placements (the caller builds its Python key; the full path
// names what is wrong); TypeError for a non-DistTensor `x`. One call, where a tuple of Paddle's
// placement objects costs a formatted string per placement to hash.
py::object ReshardKey(py::handle x, py::handle mesh, py::handle placements) {
  const DistTensor* d = DistOf(x.ptr());
  if (d == nullptr) throw py::type_error("paddle-ext reshard key: not a DistTensor");
  ScratchKey scratch;
  std::string& key = *scratch.get();
  PutMeshRanks(&key, d->process_mesh());
  PutDims(&key, d->dims());
  Put(&key, static_cast<int64_t>(d->dtype()));
  const auto& own = d->placements();
  Put(&key, static_cast<int64_t>(own.size()));
  for (const auto& p : own) {
    if (!p || !PutPlacement(&key, *p)) throw py::type_error("paddle-ext reshard key: a placement of unknown kind");
  }
  if (!PutTarget(&key, mesh, placements)) return py::none();
  PyObject* sg = PyObject_GetAttr(x.ptr(), StopGradientName());
  if (sg == nullptr) throw py::error_already_set();
  Put(&key, sg == Py_True ? 1 : 0);
  Py_DECREF(sg);
  return scratch.bytes();
}

// The dense tensor behind a Python Tensor object (a DistTensor's: its local value); TypeError for
// anything else.
phi::DenseTensor* DenseOf(py::handle obj, const char* what) {
  if (!paddle::pybind::PyCheckTensor(obj.ptr()))
    throw py::type_error(std::string("paddle-ext fast path: ") + what + " is not a Tensor");
  phi::TensorBase* impl = reinterpret_cast<paddle::pybind::TensorObject*>(obj.ptr())->tensor.impl().get();
  if (impl != nullptr && DistTensor::classof(impl)) impl = static_cast<DistTensor*>(impl)->unsafe_mutable_value();
  if (impl == nullptr || !phi::DenseTensor::classof(impl) || !impl->initialized())
    throw py::type_error(std::string("paddle-ext fast path: ") + what + " is not an allocated dense tensor");
  return static_cast<phi::DenseTensor*>(impl);
}

// The gloo communicator of a dygraph group (keyed by the group's id); ValueError when there is none.
phi::distributed::GlooCommContext* GlooRing(const std::string& ring) {
  auto& manager = phi::distributed::CommContextManager::GetInstance();
  if (!manager.Has(ring)) throw py::value_error("paddle-ext fast path: no gloo communicator " + ring);
  return static_cast<phi::distributed::GlooCommContext*>(manager.Get(ring));
}

// Contiguous tensors of one dtype, `out` holding a whole number of `local`s; ValueError otherwise.
void CheckPair(const phi::DenseTensor* x, const phi::DenseTensor* y, const char* what) {
  if (x->dtype() != y->dtype() || x->numel() == 0 || y->numel() % x->numel() != 0 || !x->meta().is_contiguous() ||
      !y->meta().is_contiguous())
    throw py::value_error(std::string("paddle-ext ") + what + ": contiguous input and output of one dtype");
}

// S(0) -> R on gloo ring `ring`: every rank's dim-0 shard `local` gathered into `out` (the caller's).
void AllGatherInto(py::handle local, py::handle out, const std::string& ring) {
  phi::DenseTensor* x = DenseOf(local, "the local shard");
  phi::DenseTensor* y = DenseOf(out, "the output");
  CheckPair(x, y, "all_gather_into");
  auto* comm = GlooRing(ring);
  py::gil_scoped_release free;
  comm->AllGather(y, *x, 0);
}

// P -> R on gloo ring `ring`: `out` (the caller's, as large as `local`) = the reduction of every
// rank's `local` (phi::ReduceType: 0 sum, 1 max, 2 min); `local` is only read.
void AllReduceInto(py::handle local, py::handle out, const std::string& ring, int reduce_type) {
  phi::DenseTensor* x = DenseOf(local, "the local value");
  phi::DenseTensor* y = DenseOf(out, "the output");
  CheckPair(x, y, "all_reduce_into");
  if (x->numel() != y->numel()) throw py::value_error("paddle-ext all_reduce_into: output and input differ in size");
  auto* comm = GlooRing(ring);
  py::gil_scoped_release free;
  comm->AllReduce(y, *x, reduce_type, 0);
}

// S(0) -> S(dim) of a global tensor on the ranks of gloo ring `ring` (a dygraph group's id): gather
// every rank's dim-0 shard `local` into `gathered` (the global tensor), then copy block `block` of
// `dim` into `out` (global dims with dims[dim] / ranks). All three tensors are the caller's, on CPU,
// of one dtype; the gloo wait runs without the GIL. ValueError for shapes that do not fit.
void GatherTake(py::handle local, py::handle out, const std::string& ring, py::handle gathered, int dim,
                int64_t block) {
  phi::DenseTensor* x = DenseOf(local, "the local shard");
  phi::DenseTensor* all = DenseOf(gathered, "the gather buffer");
  phi::DenseTensor* y = DenseOf(out, "the output");
  const phi::DDim& g = all->dims();
  CheckPair(x, all, "gather_take");
  CheckPair(y, all, "gather_take");
  if (dim <= 0 || dim >= g.size()) throw py::value_error("paddle-ext gather_take: a dim >= 1 of the buffer");
  int64_t ranks = all->numel() / x->numel(), outer = 1, inner = phi::SizeOf(all->dtype());
  for (int i = 0; i < dim; ++i) outer *= g[i];
  for (int i = dim + 1; i < g.size(); ++i) inner *= g[i];
  if (g[dim] % ranks != 0 || block < 0 || block >= ranks || y->numel() * ranks != all->numel())
    throw py::value_error("paddle-ext gather_take: the buffer's dim does not split evenly into the output's blocks");
  auto* comm = GlooRing(ring);
  int64_t rows = g[dim] / ranks;
  {
    py::gil_scoped_release free;
    comm->AllGather(all, *x, 0);
    const char* src = static_cast<const char*>(all->data());
    char* dst = static_cast<char*>(y->data());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * rows * inner, src + (o * g[dim] + block * rows) * inner, rows * inner);
  }
}

// True when `t` (a dense Tensor) is the only holder of its memory: no other tensor (a DistTensor
// built on it, a view) shares it, so the reshard fast path may write its next result there.
// Two ways to share it: another DenseTensor on the same allocation (a view, a copy of the meta), or
// the very DenseTensor (a DistTensor built on it keeps it as its local value).
bool SoleOwner(py::handle t) {
  const phi::DenseTensor* d = DenseOf(t, "the tensor");
  return d->Holder().use_count() == 1 &&
         reinterpret_cast<paddle::pybind::TensorObject*>(t.ptr())->tensor.impl().use_count() == 1;
}

// The index of a DistTensor in `slots` (a list of earlier results of one runner) that nothing but the
// list holds any more, or -1: no other Python reference, no other Tensor on the DistTensor (an
// autograd graph, a copy), none on its local value or that value's memory (a `_local_value()`, a
// view), no gradient asked for or kept. Writing the next result into it is then invisible.
int FreeSlot(py::handle slots) {
  PyObject* seq = slots.ptr();
  if (!PyList_Check(seq)) throw py::type_error("paddle-ext free_slot: a list of DistTensors");
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(seq); ++i) {
    PyObject* obj = PyList_GET_ITEM(seq, i);
    if (Py_REFCNT(obj) != 1 || !paddle::pybind::PyCheckTensor(obj)) continue;
    const auto& impl = reinterpret_cast<paddle::pybind::TensorObject*>(obj)->tensor.impl();
    if (impl.use_count() != 1 || !DistTensor::classof(impl.get())) continue;
    auto* d = static_cast<DistTensor*>(impl.get());
    if (d->shared_value().use_count() != 2 || !d->value().initialized() || d->value().Holder().use_count() != 1)
      continue;
    PyObject* sg = PyObject_GetAttr(obj, StopGradientName());
    if (sg == nullptr) throw py::error_already_set();
    bool frozen = sg == Py_True;
    Py_DECREF(sg);
    if (!frozen) continue;
    PyObject* grad = PyObject_GetAttr(obj, GradName());
    if (grad == nullptr) throw py::error_already_set();
    bool none = grad == Py_None;
    Py_DECREF(grad);
    if (none) return static_cast<int>(i);
  }
  return -1;
}

// The dispatch fast path's lookup (paddle_ext/dispatch/plan_cache.py): for DistTensor `slots` on one
// mesh, `plan = plans.get((op, attributes, layout))` with the attributes `()` for an empty dict, else
// `tuple(attrs.items())`; `layout` (bytes) and `no_grad` as fast_key's. `layout` is None when fast_key
// has no key for the slots; `plan` (a new reference) is None also when the attributes cannot be hashed
// (the caller normalises them). Objects are made only for the dict's key.
struct FoundPlan {
  py::object layout = py::none();
  bool no_grad = true;
  py::object plan = py::none();
};

// `plans.get((op, attributes, layout))` as a new reference, or nullptr when it is absent or the
// attributes cannot be hashed (the caller normalises them).
PyObject* LookUpPlan(PyObject* plans, PyObject* op, PyObject* attrs, PyObject* layout) {
  Py_ssize_t n = PyDict_GET_SIZE(attrs);
  py::object named = py::reinterpret_steal<py::object>(PyTuple_New(n));   // tuple(attrs.items())
  if (!named) throw py::error_already_set();
  Py_ssize_t pos = 0, i = 0;
  PyObject *name, *value;
  while (i < n && PyDict_Next(attrs, &pos, &name, &value)) {
    PyObject* item = PyTuple_Pack(2, name, value);
    if (item == nullptr) throw py::error_already_set();
    PyTuple_SET_ITEM(named.ptr(), i++, item);
  }
  py::object key = py::reinterpret_steal<py::object>(PyTuple_Pack(3, op, named.ptr(), layout));
  if (!key) throw py::error_already_set();
  PyObject* plan = PyDict_GetItemWithError(plans, key.ptr());   // borrowed
  if (plan == nullptr) {
    if (PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
      PyErr_Clear();   // an unhashable attribute
    }
    return nullptr;
  }
  Py_INCREF(plan);
  return plan;
}

FoundPlan FindPlan(PyObject* plans, PyObject* op, PyObject* attrs, PyObject* slots) {
  if (!PyDict_Check(plans) || !PyDict_Check(attrs)) throw py::type_error("paddle-ext plan_of: dicts");
  FoundPlan found;
  {
    ScratchKey scratch;
    if (!BuildKey(slots, scratch.get(), &found.no_grad)) return found;
    found.layout = scratch.bytes();
  }
  PyObject* plan = LookUpPlan(plans, op, attrs, found.layout.ptr());
  if (plan != nullptr) found.plan = py::reinterpret_steal<py::object>(plan);
  return found;
}

// `(plan or None, layout, no_grad)`, or None when fast_key has no key for the slots.
py::object PlanOf(py::handle plans, py::handle op, py::handle attrs, py::handle slots) {
  FoundPlan found = FindPlan(plans.ptr(), op.ptr(), attrs.ptr(), slots.ptr());
  if (found.layout.is_none()) return py::none();
  return py::make_tuple(found.plan, found.layout, found.no_grad);
}

// True when `x` is a DistTensor on a mesh equal to `mesh` (Paddle's own ProcessMesh compare: shape and
// process ids), False when it is not; None when `mesh` is not a ProcessMesh (the caller compares in
// Python). The reshard fast path's hand-back without a process group: no Python mesh object is made.
py::object SameMesh(py::handle x, py::handle mesh) {
  const DistTensor* d = DistOf(x.ptr());
  const ProcessMesh* target = BoundValue<ProcessMesh>(mesh.ptr(), g_mesh_type);
  if (target == nullptr) return py::none();
  return py::bool_(d != nullptr && d->process_mesh() == *target);
}


}  // namespace
