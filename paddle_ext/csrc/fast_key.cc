// paddle-ext: the dispatch fast path's cache key, and the source half of the reshard fast path's
// plan key, read straight from the DistTensors.
//
// Built by paddle_ext/compat/native/cpp_build.py (piece "fast_key") against the installed Paddle's
// headers; loaded by paddle_ext/compat/native/fast_key.py (which documents the key's contents).
#include <Python.h>

#include <string>

#include "paddle/extension.h"
#include "paddle/phi/core/distributed/auto_parallel/dist_tensor.h"
#include "paddle/phi/core/distributed/auto_parallel/placement_types.h"
#include "paddle/utils/pybind.h"

namespace {
using phi::distributed::DistTensor;
using phi::distributed::ProcessMesh;

inline void Put(std::string* key, int64_t v) { key->append(reinterpret_cast<const char*>(&v), sizeof v); }

template <typename V>
void PutInts(std::string* key, const V& values) {
  Put(key, static_cast<int64_t>(values.size()));
  for (auto v : values) Put(key, static_cast<int64_t>(v));
}

void PutMesh(std::string* key, const ProcessMesh& mesh) {
  PutInts(key, mesh.shape());
  PutInts(key, mesh.process_ids());
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

// (key bytes, no input requires grad) for a list or tuple of DistTensors on one mesh, else None.
py::object FastKey(py::handle slots) {
  PyObject* seq = slots.ptr();
  if (!PyList_Check(seq) && !PyTuple_Check(seq)) return py::none();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  if (n == 0) return py::none();
  std::string key;
  key.reserve(256);
  const ProcessMesh* first = nullptr;
  bool no_grad = true;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* obj = items[i];
    if (!paddle::pybind::PyCheckTensor(obj)) return py::none();
    const paddle::Tensor& t = reinterpret_cast<paddle::pybind::TensorObject*>(obj)->tensor;
    phi::TensorBase* impl = t.impl().get();
    if (impl == nullptr || !DistTensor::classof(impl)) return py::none();
    const auto* d = static_cast<const DistTensor*>(impl);
    const ProcessMesh& mesh = d->process_mesh();
    if (first == nullptr) {
      first = &mesh;
      PutMesh(&key, mesh);
    } else if (!SameMesh(*first, mesh)) {
      return py::none();
    }
    const auto& dims = d->dims();
    Put(&key, dims.size());
    for (int k = 0; k < dims.size(); ++k) Put(&key, dims[k]);
    const auto& placements = d->placements();
    Put(&key, static_cast<int64_t>(placements.size()));
    for (const auto& p : placements) {
      if (!p || !PutPlacement(&key, *p)) return py::none();
    }
    PyObject* sg = PyObject_GetAttrString(obj, "stop_gradient");
    if (sg == nullptr) throw py::error_already_set();
    if (sg != Py_True) no_grad = false;
    Py_DECREF(sg);
  }
  return py::make_tuple(py::bytes(key), no_grad);
}

// The source half of the reshard fast path's plan key (paddle_ext/reshard/fast.py): one
// DistTensor's mesh (shape and process ids; dim names are labels a plan does not read), global
// dims, dtype and placements. TypeError for anything else, so the caller takes its full path.
py::bytes ReshardSourceKey(py::handle x) {
  PyObject* obj = x.ptr();
  if (!paddle::pybind::PyCheckTensor(obj)) throw py::type_error("paddle-ext reshard key: not a Tensor");
  const paddle::Tensor& t = reinterpret_cast<paddle::pybind::TensorObject*>(obj)->tensor;
  phi::TensorBase* impl = t.impl().get();
  if (impl == nullptr || !DistTensor::classof(impl)) throw py::type_error("paddle-ext reshard key: not a DistTensor");
  const auto* d = static_cast<const DistTensor*>(impl);
  std::string key;
  key.reserve(160);
  PutInts(&key, d->process_mesh().shape());
  PutInts(&key, d->process_mesh().process_ids());
  const auto& dims = d->dims();
  Put(&key, dims.size());
  for (int k = 0; k < dims.size(); ++k) Put(&key, dims[k]);
  Put(&key, static_cast<int64_t>(d->dtype()));
  const auto& placements = d->placements();
  Put(&key, static_cast<int64_t>(placements.size()));
  for (const auto& p : placements) {
    if (!p || !PutPlacement(&key, *p)) throw py::type_error("paddle-ext reshard key: a placement of unknown kind");
  }
  return py::bytes(key);
}

}  // namespace

PYBIND11_MODULE(paddle_ext_fast_key, m) {
  m.def("fast_key", &FastKey, "paddle-ext dispatch key of DistTensor slots: (bytes, no_grad) or None");
  m.def("reshard_source_key", &ReshardSourceKey,
        "paddle-ext reshard key of a DistTensor: bytes of its mesh, dims, dtype and placements");
}
