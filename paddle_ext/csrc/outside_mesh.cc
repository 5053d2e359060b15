// paddle-ext: let a rank outside a DistTensor's mesh run ops on it (Paddle 3.3.1 CPU wheel).
//
// Why C++: on a rank outside an op's mesh, every generated dist API makes its outputs' empty
// locals at phi::distributed::GetDefaultPlace(). On the CPU wheel (built with custom-device
// support) that function reads the first registered custom device type without checking the list
// is empty, so with none registered any such op dies with SIGSEGV. The autograd engine reaches it
// too (a backward seed copy), so no Python guard can avoid it.
//
// The fix, opt-in through paddle_ext.install(ranks_outside_mesh=True) (paddle_ext/compat/
// outside_mesh.py): register, inside this process, a custom device type "no_device" that has
// zero devices, so GetDefaultPlace() returns Place(no_device:0); and serve that place with a CPU
// device context that shares the CPU context's allocators and generators, so a kernel or a
// reshard that asks for the place's context gets the CPU one. No memory is ever allocated on it.
//
// Built by paddle_ext/compat/native/cpp_build.py (piece "outside_mesh") against the installed Paddle's
// headers. The two macros below are how the wheel itself was built; without them the headers
// leave out the custom-device declarations this file uses.
#ifndef PADDLE_WITH_CUSTOM_DEVICE
#define PADDLE_WITH_CUSTOM_DEVICE
#endif
#ifndef PADDLE_WITH_DISTRIBUTE
#define PADDLE_WITH_DISTRIBUTE
#endif

#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "paddle/extension.h"
#include "paddle/phi/backends/context_pool.h"
#include "paddle/phi/backends/cpu/cpu_context.h"
#include "paddle/phi/backends/device_ext.h"
#include "paddle/phi/backends/device_manager.h"
#include "paddle/phi/core/distributed/auto_parallel/reshard/reshard_utils.h"

namespace {
// The callbacks the runtime loader requires. The type has no device, so none of them is asked
// to do real work; allocation fails loudly if anything ever tries.
C_Status set_device(const C_Device) { return C_SUCCESS; }
C_Status get_device(const C_Device device) {
  device->id = 0;
  return C_SUCCESS;
}
C_Status create_event(const C_Device, C_Event* event) {
  *event = nullptr;
  return C_SUCCESS;
}
C_Status record_event(const C_Device, C_Stream, C_Event) { return C_SUCCESS; }
C_Status destroy_event(const C_Device, C_Event) { return C_SUCCESS; }
C_Status synchronize_event(const C_Device, C_Event) { return C_SUCCESS; }
C_Status allocate(const C_Device, void** ptr, size_t) {
  *ptr = nullptr;
  return C_FAILED;
}
C_Status deallocate(const C_Device, void*, size_t) { return C_SUCCESS; }
C_Status device_count(size_t* count) {
  *count = 0;
  return C_SUCCESS;
}
C_Status device_list(size_t*) { return C_SUCCESS; }

char kDeviceType[] = "no_device";
char kSubDeviceType[] = "none";
}  // namespace

// Register "no_device" (zero devices) once; returns the custom device types now registered.
std::vector<std::string> register_zero_device() {
  auto types = phi::DeviceManager::GetAllCustomDeviceTypes();
  for (const auto& t : types) {
    if (t == kDeviceType) return types;
  }
  auto iface = std::make_unique<C_DeviceInterface>();
  std::memset(iface.get(), 0, sizeof(C_DeviceInterface));
  iface->size = sizeof(C_DeviceInterface);
  iface->set_device = set_device;
  iface->get_device = get_device;
  iface->create_event = create_event;
  iface->record_event = record_event;
  iface->destroy_event = destroy_event;
  iface->synchronize_event = synchronize_event;
  iface->device_memory_allocate = allocate;
  iface->device_memory_deallocate = deallocate;
  iface->get_device_count = device_count;
  iface->get_device_list = device_list;
  CustomRuntimeParams params;
  std::memset(&params, 0, sizeof(params));
  params.size = sizeof(CustomRuntimeParams);
  params.interface = iface.get();
  params.version.major = PADDLE_CUSTOM_RUNTIME_MAJOR_VERSION;
  params.version.minor = PADDLE_CUSTOM_RUNTIME_MINOR_VERSION;
  params.version.patch = PADDLE_CUSTOM_RUNTIME_PATCH_VERSION;
  params.device_type = kDeviceType;
  params.sub_device_type = kSubDeviceType;
  phi::LoadCustomRuntimeLib(params, std::move(iface), "<paddle-ext in-process>", nullptr);
  return phi::DeviceManager::GetAllCustomDeviceTypes();
}

// What GetDefaultPlace() returns now (the caller checks it is "Place(no_device:0)").
std::string default_place() { return phi::distributed::GetDefaultPlace().DebugString(); }

// Serve the default place with a CPU context sharing the CPU context's allocators and generators
// (once); returns the place of the context the pool now hands out for it.
std::string serve_default_place_with_cpu() {
  auto& pool = phi::DeviceContextPool::Instance();
  auto place = phi::distributed::GetDefaultPlace();
  auto& contexts = const_cast<std::map<phi::Place, std::shared_future<std::unique_ptr<phi::DeviceContext>>>&>(
      pool.device_contexts());
  if (contexts.find(place) == contexts.end()) {
    auto* cpu = static_cast<phi::CPUContext*>(pool.Get(phi::CPUPlace()));
    auto ctx = std::make_unique<phi::CPUContext>(phi::CPUPlace());
    ctx->SetAllocator(&cpu->GetAllocator());
    ctx->SetHostAllocator(&cpu->GetHostAllocator());
    ctx->SetZeroAllocator(&cpu->GetZeroAllocator());
    ctx->SetHostZeroAllocator(&cpu->GetHostZeroAllocator());
    ctx->SetGenerator(cpu->GetGenerator());
    ctx->SetHostGenerator(cpu->GetHostGenerator());
    std::promise<std::unique_ptr<phi::DeviceContext>> ready;
    ready.set_value(std::move(ctx));
    contexts.emplace(place, ready.get_future().share());
  }
  return pool.Get(place)->GetPlace().DebugString();
}

PYBIND11_MODULE(paddle_ext_outside_mesh, m) {
  m.def("register_zero_device", &register_zero_device);
  m.def("default_place", &default_place);
  m.def("serve_default_place_with_cpu", &serve_default_place_with_cpu);
}
