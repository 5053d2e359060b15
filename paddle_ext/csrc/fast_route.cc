// paddle-ext: the dispatch fast path's route, and the module's per-call entry points.
//
// The second half of the piece "fast_key" (paddle_ext/compat/native/cpp_build.py joins fast_key.cc and
// this file into one translation unit; it does not compile alone): the dispatcher's hot route in one
// call (Route), and the module's functions and their table.

// Paddle's thread-local dygraph state, as its own C++ functions read it (exported by libpaddle on the
// Paddle versions paddle_ext/compat/version.py names; its headers are not in the wheel). The Itanium
// names of `const std::shared_ptr<Tracer>& paddle::imperative::GetCurrentTracer()` (what
// `core._switch_tracer` sets: None outside dygraph) and `bool paddle::imperative::Tracer::HasGrad() const`
// (what `core._has_grad()` returns: False under `paddle.no_grad()`). fast_key.py checks both readings
// against Paddle's Python ones before the dispatcher uses Route.
const std::shared_ptr<void>& PaddleCurrentTracer() __asm__("_ZN6paddle10imperative16GetCurrentTracerEv");
bool PaddleTracerHasGrad(const void* tracer) __asm__("_ZNK6paddle10imperative6Tracer7HasGradEv");

#include <unordered_map>

namespace {

PyObject* ByPaddleName() {
  static PyObject* name = PyUnicode_InternFromString("by_paddle");
  return name;
}

// The route's memo of the plan cache: call key -> the plan `plans` gave for it (a strong reference).
// A call key is the layout BuildKey writes, then the op's name and the attributes (PutCall): finer
// than the dict's key (an int 1 and a True are two entries here, one there), and filled only from
// the dict's own answers, so a memo hit is the plan the dict holds. It spares the dict's key objects
// (the layout's bytes, two tuples) and their hashing: about 1 us of a repeated call next to a small
// op on this VM. Emptied whenever the dict may lose a plan (forget_plans: paddle_ext/dispatch/plan_cache.py
// calls it when a rule changes) or the route is bound to another dict. Its entries are the call keys
// the dict answered: at most a few per plan the dict has held (one per way of writing equal
// attributes), so bounded as the dict is (plan_cache.LIMIT plans).
class PlanMemo {
 public:
  PyObject* Find(const std::string& key) const {   // borrowed, or nullptr
    auto it = plans_->find(key);
    return it == plans_->end() ? nullptr : it->second;
  }
  void Keep(const std::string& key, PyObject* plan) {
    auto [it, added] = plans_->emplace(key, plan);
    if (added) Py_INCREF(plan);
  }
  void Clear() {
    std::unordered_map<std::string, PyObject*> old;
    old.swap(*plans_);   // emptied before any plan's last reference goes (its finaliser may call back)
    for (auto& entry : old) Py_DECREF(entry.second);
  }

 private:
  // never destroyed: at exit the interpreter may be gone before static destructors run
  std::unordered_map<std::string, PyObject*>* plans_ = new std::unordered_map<std::string, PyObject*>();
} g_memo;

// What Route reads besides its arguments, bound once by paddle_ext/dispatch/core.py (through
// fast_key.bind_route): the plan cache (a dict), the route switch (a ContextVar) and its default,
// the list of active audits, and the Python decision for every call Route does not run.
struct RouteState {
  PyObject* plans = nullptr;
  PyObject* routes = nullptr;
  PyObject* all_routes = nullptr;
  PyObject* audits = nullptr;
  PyObject* decide = nullptr;
} g_route;

void SetRouteState(py::handle plans, py::handle routes, py::handle all_routes, py::handle audits, py::handle decide) {
  if (!PyDict_Check(plans.ptr()) || !PyContextVar_CheckExact(routes.ptr()) || !PyList_Check(audits.ptr()) ||
      !PyCallable_Check(decide.ptr()))
    throw py::type_error("paddle-ext set_route_state(plans: dict, routes: ContextVar, all_routes, audits: list, decide)");
  for (PyObject** slot : {&g_route.plans, &g_route.routes, &g_route.all_routes, &g_route.audits, &g_route.decide})
    Py_XDECREF(*slot);
  g_route.plans = plans.inc_ref().ptr();
  g_route.routes = routes.inc_ref().ptr();
  g_route.all_routes = all_routes.inc_ref().ptr();
  g_route.audits = audits.inc_ref().ptr();
  g_route.decide = decide.inc_ref().ptr();
  g_memo.Clear();   // its plans came from the old dict
}

// True when the plan's differentiable calls run Paddle's own op (`plan.by_paddle is True`) and no
// route switch is set (`routes.get() is all_routes`).
bool ByPaddle(PyObject* plan) {
  PyObject* by_paddle = PyObject_GetAttr(plan, ByPaddleName());
  if (by_paddle == nullptr) throw py::error_already_set();
  bool by = by_paddle == Py_True;
  Py_DECREF(by_paddle);
  if (!by) return false;
  PyObject* chosen = nullptr;
  if (PyContextVar_Get(g_route.routes, nullptr, &chosen) < 0) throw py::error_already_set();
  bool all = chosen == g_route.all_routes;
  Py_XDECREF(chosen);
  return all;
}

// Appends the text of a str; false when `obj` is not exactly a str.
bool PutText(std::string* key, PyObject* obj) {
  if (!PyUnicode_CheckExact(obj)) return false;
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(obj, &size);
  if (text == nullptr) {
    PyErr_Clear();   // a lone surrogate: no memo entry (the dict serves the call)
    return false;
  }
  Put(key, size);
  key->append(text, size);
  return true;
}

// Appends one attribute value: None, a bool, an int that fits 64 bits, a float, a str, or a tuple of
// those; false for anything else (the dict serves the call).
bool PutValue(std::string* key, PyObject* v, int depth = 0) {
  if (v == Py_None) {
    Put(key, 0);
  } else if (PyBool_Check(v)) {
    Put(key, v == Py_True ? 2 : 1);
  } else if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    Put(key, 3);
    Put(key, value);
  } else if (PyFloat_CheckExact(v)) {
    double value = PyFloat_AS_DOUBLE(v);
    int64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    Put(key, 4);
    Put(key, bits);
  } else if (PyUnicode_CheckExact(v)) {
    Put(key, 5);
    return PutText(key, v);
  } else if (PyTuple_CheckExact(v) && depth == 0) {
    Put(key, 6);
    Put(key, PyTuple_GET_SIZE(v));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); ++i)
      if (!PutValue(key, PyTuple_GET_ITEM(v, i), 1)) return false;
  } else {
    return false;
  }
  return true;
}

// Appends the op's name and the attributes (in the dict's order, as tuple(attrs.items()) reads them)
// to a layout; false when a name or value is of a kind PutValue does not write.
bool PutCall(std::string* key, PyObject* op, PyObject* attrs) {
  if (!PutText(key, op)) return false;
  Put(key, PyDict_GET_SIZE(attrs));
  Py_ssize_t pos = 0;
  PyObject *name, *value;
  while (PyDict_Next(attrs, &pos, &name, &value))
    if (!PutText(key, name) || !PutValue(key, value)) return false;
  return true;
}

// The plan of a call whose slots have a compiled key: from the memo, else from the dict (then kept in
// the memo when the call key could be written). `layout` is set only when the dict was asked.
struct RoutePlan {
  py::object plan = py::none();
  py::object layout = py::none();
  bool keyed = false;   // the slots have a compiled key
  bool no_grad = true;
};

RoutePlan FindRoutePlan(PyObject* op, PyObject* attrs, PyObject* slots) {
  RoutePlan found;
  ScratchKey scratch;
  std::string* key = scratch.get();
  if (!BuildKey(slots, key, &found.no_grad)) return found;
  found.keyed = true;
  size_t layout_size = key->size();
  bool memo = PutCall(key, op, attrs);
  if (PyObject* plan = memo ? g_memo.Find(*key) : nullptr) {
    found.plan = py::reinterpret_borrow<py::object>(plan);
    return found;
  }
  found.layout = py::bytes(key->data(), layout_size);
  if (PyObject* plan = LookUpPlan(g_route.plans, op, attrs, found.layout.ptr())) {
    found.plan = py::reinterpret_steal<py::object>(plan);
    if (memo) g_memo.Keep(*key, plan);
  }
  return found;
}

// paddle_ext/dispatch/core.py's dispatch(op, slots, attrs, run_local), its most common answer taken here:
// in dygraph, no audit active, a cached plan whose differentiable calls run Paddle's own op and no
// route switch set, with grad on and an input that requires grad, the call is `run_local(slots, None)`.
// Every other call is `decide(op, slots, attrs, run_local, found)`, where found is plan_of's answer
// `(plan or None, layout, no_grad)` (layout None when the memo answered), False when the slots have no
// compiled key, None when Route did not look (outside dygraph, attributes not a dict).
py::object Route(PyObject* op, PyObject* slots, PyObject* attrs, PyObject* run_local) {
  if (g_route.decide == nullptr) throw py::type_error("paddle-ext route: set_route_state was not called");
  py::object looked = py::none();
  const void* tracer = PaddleCurrentTracer().get();
  if (tracer != nullptr && PyDict_CheckExact(attrs)) {
    RoutePlan found = FindRoutePlan(op, attrs, slots);
    if (!found.keyed) {
      looked = py::bool_(false);
    } else {
      if (!found.plan.is_none() && !found.no_grad && PyList_GET_SIZE(g_route.audits) == 0 &&
          PaddleTracerHasGrad(tracer) && ByPaddle(found.plan.ptr())) {
        PyObject* args[2] = {slots, Py_None};
        PyObject* outs = PyObject_Vectorcall(run_local, args, 2, nullptr);
        if (outs == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::object>(outs);
      }
      looked = py::make_tuple(found.plan, found.layout, found.no_grad);
    }
  }
  PyObject* args[5] = {op, slots, attrs, run_local, looked.ptr()};
  PyObject* outs = PyObject_Vectorcall(g_route.decide, args, 5, nullptr);
  if (outs == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(outs);
}

// The per-call functions as plain CPython functions (METH_FASTCALL): pybind11's dispatcher (argument
// records, overload resolution) costs about as much as the functions themselves, and these run on
// every repeated dist.reshard and dispatched op.
template <typename Call>
PyObject* Guarded(Call&& call) {
  try {
    return call().release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

bool Arity(Py_ssize_t nargs, Py_ssize_t want, const char* signature) {
  if (nargs == want) return true;
  PyErr_Format(PyExc_TypeError, "paddle-ext %s takes %zd arguments, got %zd", signature, want, nargs);
  return false;
}

PyObject* FastKeyRaw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!Arity(nargs, 1, "fast_key(slots)")) return nullptr;
  return Guarded([&] { return FastKey(args[0]); });
}

PyObject* ReshardKeyRaw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!Arity(nargs, 3, "reshard_key(x, mesh, placements)")) return nullptr;
  return Guarded([&] { return ReshardKey(args[0], args[1], args[2]); });
}

PyObject* SameMeshRaw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!Arity(nargs, 2, "same_mesh(x, mesh)")) return nullptr;
  return Guarded([&] { return SameMesh(args[0], args[1]); });
}

PyObject* PlanOfRaw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!Arity(nargs, 4, "plan_of(plans, op, attrs, slots)")) return nullptr;
  return Guarded([&] { return PlanOf(args[0], args[1], args[2], args[3]); });
}

PyObject* FreeSlotRaw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!Arity(nargs, 1, "free_slot(slots)")) return nullptr;
  return Guarded([&] { return py::reinterpret_steal<py::object>(PyLong_FromLong(FreeSlot(args[0]))); });
}

PyObject* RouteRaw(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!Arity(nargs, 4, "route(op, slots, attrs, run_local)")) return nullptr;
  return Guarded([&] { return Route(args[0], args[1], args[2], args[3]); });
}

PyObject* ForgetPlansRaw(PyObject*, PyObject* const*, Py_ssize_t nargs) {
  if (!Arity(nargs, 0, "forget_plans()")) return nullptr;
  g_memo.Clear();
  Py_RETURN_NONE;
}

// None outside dygraph, else whether grad is on (on this thread): what Route reads, the reshard fast
// path's two state tests in one call, and what fast_key.route_agrees checks.
PyObject* GradStateRaw(PyObject*, PyObject* const*, Py_ssize_t nargs) {
  if (!Arity(nargs, 0, "grad_state()")) return nullptr;
  const void* tracer = PaddleCurrentTracer().get();
  PyObject* state = tracer == nullptr ? Py_None : (PaddleTracerHasGrad(tracer) ? Py_True : Py_False);
  Py_INCREF(state);
  return state;
}

PyMethodDef kRaw[] = {
    {"fast_key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&FastKeyRaw)), METH_FASTCALL,
     "paddle-ext dispatch key of DistTensor slots: (bytes, no_grad) or None"},
    {"reshard_key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&ReshardKeyRaw)), METH_FASTCALL,
     "paddle-ext reshard key of a request: bytes of the source, the target mesh and placements, stop_gradient"},
    {"plan_of", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&PlanOfRaw)), METH_FASTCALL,
     "paddle-ext dispatch lookup: (plans.get((op, attrs, layout)), layout, no_grad), or None without a key"},
    {"same_mesh", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&SameMeshRaw)), METH_FASTCALL,
     "paddle-ext: x is a DistTensor on a mesh equal to mesh (None when mesh is not a ProcessMesh)"},
    {"free_slot", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&FreeSlotRaw)), METH_FASTCALL,
     "index of an earlier result in the list that nothing else holds, or -1"},
    {"route", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&RouteRaw)), METH_FASTCALL,
     "paddle-ext dispatch(op, slots, attrs, run_local): its hot route here, every other call decided in Python"},
    {"forget_plans", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&ForgetPlansRaw)), METH_FASTCALL,
     "paddle-ext: empty route's memo of the plan cache (the dict dropped plans)"},
    {"grad_state", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&GradStateRaw)), METH_FASTCALL,
     "paddle-ext: None outside dygraph, else whether grad is on"},
};

}  // namespace

PYBIND11_MODULE(paddle_ext_fast_key, m) {
  for (auto& def : kRaw) m.add_object(def.ml_name, py::reinterpret_steal<py::object>(PyCFunction_New(&def, nullptr)));
  m.def("set_target_types", &SetTargetTypes,
        "paddle-ext: Paddle's ProcessMesh, Shard, Partial and Replicate classes, for reshard_key's target half");
  m.def("set_route_state", &SetRouteState,
        "paddle-ext: what route reads (plans, routes ContextVar, its default, audits list, the Python decision)");
  m.def("target_key", &TargetKey, "paddle-ext reshard key's target half: bytes of the mesh and placements, or None");
  m.def("sole_owner", &SoleOwner, "True when no other tensor shares this dense tensor's memory");
  m.def("all_gather_into", &AllGatherInto, "paddle-ext S(0) -> R on a gloo ring: all_gather local into out");
  m.def("all_reduce_into", &AllReduceInto, "paddle-ext P -> R on a gloo ring: out = the reduction of every local");
  m.def("gather_take", &GatherTake,
        "paddle-ext S(0) -> S(dim) on a gloo ring: all_gather local into gathered, copy its block of dim into out");
}
