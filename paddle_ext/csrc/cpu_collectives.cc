// paddle-ext: CPU reduce_scatter, all_to_all, send and recv for Paddle's C++ reshard (Paddle
// 3.3.1 CPU wheel, gloo).
//
// Why: the C++ P -> S reshard (p_to_s_reshard_function.cc, reached from C++ only: the backward
// of an all-gather the dist API inserted, e.g. a ZeRO-3 parameter's S(0) -> R on "dp" when the
// mesh is dp x mp) calls phi::ReduceScatterKernel<T, CPUContext>, and the C++ S(i) -> S(j)
// reshard (s_to_s_reshard_function.cc; dist.reshard without init_parallel_env) calls
// phi::AllToAllKernel<T, CPUContext>. On the CPU wheel both only throw ("Unimplemented cpu
// kernel for CReduceScatterOp" / "for all_to_all"). The C++ cross-mesh move
// (same_status_reshard_function.cc: dist.reshard between meshes of one shape, which Paddle also
// reaches from its cross-mesh S -> R and from dist.parallelize's pipeline stages) calls
// phi::PSendKernel / PRecvKernel<T, CPUContext>, which throw "Do not support send for cpu kernel
// now". No Python hook sees those calls.
//
// How: libphi_core.so calls both kernels through its PLT, so each call goes through a GOT slot.
// hook() points the slots of every loaded library that imports a kernel at the functions below
// (float, double, int32, int64) and unhook() puts Paddle's back. Both run on the communicator
// the reshard bound to the context (dev_ctx.GetCommContext(), the GlooCommContext of the
// reshard's ranks), with more traffic than the collective they stand for, and exact:
// - reduce_scatter: all-reduce the whole input (gloo's sum), keep this rank's block of dim 0 --
//   the same as paddle-ext's static pe_gloo_reduce_scatter (gloo_ops.cc);
// - all_to_all (block j of dim 0 goes to rank j; block j of the output came from rank j):
//   all-gather every rank's input, keep block `rank` of each rank's part -- an all_gather's
//   traffic, n times an all_to_all's.
//
// Built by paddle_ext/compat/native/cpp_build.py (piece "cpu_collectives"); applied by
// paddle_ext/compat/native/cpu_collectives.py.
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "paddle/extension.h"
#include "paddle/phi/backends/cpu/cpu_context.h"
#include "paddle/phi/core/dense_tensor.h"
#include "paddle/phi/common/data_type.h"
#include "paddle/phi/core/distributed/comm_context.h"

namespace phi {
namespace distributed {
// The wheel ships gloo_comm_context.h but not gloo's headers: declare the exported member.
class GlooCommContext : public CommContext {
 public:
  void AllReduce(phi::DenseTensor* out, const phi::DenseTensor& in, int reduce_type, uint32_t tag);  // 0: sum
  void AllGather(phi::DenseTensor* out, const phi::DenseTensor& in, uint32_t tag);
  void Send(const phi::DenseTensor& in, int dst, uint32_t tag);
  void Recv(phi::DenseTensor* out, int src, uint32_t tag);
};
}  // namespace distributed
}  // namespace phi

namespace {
std::atomic<int64_t> g_calls{0};

template <typename T>
void ReduceScatterOnGloo(const phi::CPUContext& dev_ctx, const phi::DenseTensor& x, int nranks,
                         phi::DenseTensor* out) {
  auto* comm = static_cast<phi::distributed::GlooCommContext*>(dev_ctx.GetCommContext());
  PD_CHECK(comm != nullptr, "paddle-ext cpu reduce_scatter: the reshard bound no communicator to the CPU context");
  PD_CHECK(x.dims().size() > 0 && nranks == comm->GetSize() && x.dims()[0] % nranks == 0,
           "paddle-ext cpu reduce_scatter: dim 0 of the input (", x.dims().size() > 0 ? x.dims()[0] : 0,
           ") must split evenly over ", nranks, " ranks, the communicator's size (", comm->GetSize(), ")");
  phi::DenseTensor sum;
  sum.Resize(x.dims());
  dev_ctx.Alloc(&sum, x.dtype());
  comm->AllReduce(&sum, x, 0, 0);  // 0: sum
  auto dims = x.dims();
  dims[0] /= nranks;
  out->Resize(dims);
  T* dst = static_cast<T*>(dev_ctx.Alloc(out, x.dtype()));
  int64_t block = out->numel();
  std::memcpy(dst, sum.data<T>() + block * comm->GetRank(), block * sizeof(T));
  g_calls.fetch_add(1);
}

template <typename T>
void AllToAllOnGloo(const phi::CPUContext& dev_ctx, const phi::DenseTensor& x, phi::DenseTensor* out) {
  auto* comm = static_cast<phi::distributed::GlooCommContext*>(dev_ctx.GetCommContext());
  PD_CHECK(comm != nullptr, "paddle-ext cpu all_to_all: the reshard bound no communicator to the CPU context");
  int nranks = comm->GetSize();
  PD_CHECK(x.dims().size() > 0 && x.dims()[0] % nranks == 0, "paddle-ext cpu all_to_all: dim 0 of the input (",
           x.dims().size() > 0 ? x.dims()[0] : 0, ") must split evenly over the communicator's ", nranks, " ranks");
  phi::DenseTensor gathered;  // rank r's input at [r * numel, (r + 1) * numel)
  auto dims = x.dims();
  dims[0] *= nranks;
  gathered.Resize(dims);
  dev_ctx.Alloc(&gathered, x.dtype());
  comm->AllGather(&gathered, x, 0);
  out->Resize(x.dims());
  T* dst = static_cast<T*>(dev_ctx.Alloc(out, x.dtype()));
  const T* src = gathered.data<T>();
  int64_t numel = x.numel(), block = numel / nranks, me = comm->GetRank();
  for (int64_t r = 0; r < nranks; ++r) {  // output block r: rank r's block `me`
    std::memcpy(dst + r * block, src + r * numel + me * block, block * sizeof(T));
  }
  g_calls.fetch_add(1);
}

// Point-to-point, as the C++ cross-mesh reshard (same_status_reshard_function.cc) uses it: the
// peer is a rank of the communicator the reshard bound. The receiver learns the shape from a
// header (ndim, dims; at most kMaxDims) sent before the bytes, whatever `dynamic_shape` says:
// both ends are these functions. The bytes travel as uint8, so every dtype goes the same way.
constexpr int kMaxDims = 9;
// Gloo matches a recv to a send by (peer, slot = tag); Paddle's own traffic on a communicator uses
// tag 0. Ours travels on a slot of its own, so a header or body of ours is never taken for (or
// by) another message on the same pair, and stays in order among ours.
constexpr uint32_t kP2PTag = 0x70655032;  // "peP2"

phi::distributed::GlooCommContext* P2PComm(const phi::CPUContext& dev_ctx, int peer, const char* what) {
  auto* comm = static_cast<phi::distributed::GlooCommContext*>(dev_ctx.GetCommContext());
  PD_CHECK(comm != nullptr, "paddle-ext cpu ", what, ": the reshard bound no communicator to the CPU context");
  PD_CHECK(peer >= 0 && peer < comm->GetSize() && peer != comm->GetRank(), "paddle-ext cpu ", what, ": peer ", peer,
           " is not another rank of the communicator (size ", comm->GetSize(), ", this rank ", comm->GetRank(), ")");
  return comm;
}

phi::DenseTensor Bytes(const phi::CPUContext& dev_ctx, int64_t n) {
  phi::DenseTensor t;
  t.Resize(common::make_ddim({n}));
  dev_ctx.Alloc(&t, phi::DataType::UINT8);
  return t;
}

template <typename T>
void SendOnGloo(const phi::CPUContext& dev_ctx, const phi::DenseTensor& x, int peer, bool) {
  auto* comm = P2PComm(dev_ctx, peer, "send");
  PD_CHECK(x.dims().size() <= kMaxDims && x.meta().is_contiguous(), "paddle-ext cpu send: a contiguous tensor of at "
           "most ", kMaxDims, " dims, got ", x.dims().size(), " dims");
  phi::DenseTensor header;
  header.Resize(common::make_ddim({kMaxDims + 1}));
  auto* h = static_cast<int64_t*>(dev_ctx.Alloc(&header, phi::DataType::INT64));
  h[0] = x.dims().size();
  for (int i = 0; i < x.dims().size(); ++i) h[i + 1] = x.dims()[i];
  comm->Send(header, peer, kP2PTag);
  int64_t nbytes = x.numel() * static_cast<int64_t>(phi::SizeOf(x.dtype()));
  if (nbytes > 0) {
    phi::DenseTensor bytes = Bytes(dev_ctx, nbytes);
    std::memcpy(bytes.data(), x.data(), nbytes);
    comm->Send(bytes, peer, kP2PTag);
  }
  g_calls.fetch_add(1);
}

template <typename T>
void RecvOnGloo(const phi::CPUContext& dev_ctx, int peer, phi::DataType dtype, const std::vector<int>&, bool,
                phi::DenseTensor* out) {
  auto* comm = P2PComm(dev_ctx, peer, "recv");
  phi::DenseTensor header;
  header.Resize(common::make_ddim({kMaxDims + 1}));
  auto* h = static_cast<int64_t*>(dev_ctx.Alloc(&header, phi::DataType::INT64));
  comm->Recv(&header, peer, kP2PTag);
  PD_CHECK(h[0] >= 0 && h[0] <= kMaxDims, "paddle-ext cpu recv: a header of ", h[0], " dims from rank ", peer);
  std::vector<int64_t> dims(h + 1, h + 1 + h[0]);
  out->Resize(common::make_ddim(dims));
  void* dst = dev_ctx.Alloc(out, dtype);
  int64_t nbytes = out->numel() * static_cast<int64_t>(phi::SizeOf(dtype));
  if (nbytes > 0) {
    phi::DenseTensor bytes = Bytes(dev_ctx, nbytes);
    comm->Recv(&bytes, peer, kP2PTag);
    std::memcpy(dst, bytes.data(), nbytes);
  }
  g_calls.fetch_add(1);
}

#define PE_P2P(T, SEND, RECV)                                          \
  {SEND, reinterpret_cast<void*>(&SendOnGloo<T>)}, {RECV, reinterpret_cast<void*>(&RecvOnGloo<T>)}

// The kernel instances the reshard calls (their mangled names) and the replacements.
const std::vector<std::pair<const char*, void*>>& Targets() {
  static const std::vector<std::pair<const char*, void*>> targets = {
      {"_ZN3phi19ReduceScatterKernelIfNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEiPS5_",
       reinterpret_cast<void*>(&ReduceScatterOnGloo<float>)},
      {"_ZN3phi19ReduceScatterKernelIdNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEiPS5_",
       reinterpret_cast<void*>(&ReduceScatterOnGloo<double>)},
      {"_ZN3phi19ReduceScatterKernelIiNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEiPS5_",
       reinterpret_cast<void*>(&ReduceScatterOnGloo<int32_t>)},
      {"_ZN3phi19ReduceScatterKernelIlNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEiPS5_",
       reinterpret_cast<void*>(&ReduceScatterOnGloo<int64_t>)},
      {"_ZN3phi14AllToAllKernelIfNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEPS5_",
       reinterpret_cast<void*>(&AllToAllOnGloo<float>)},
      {"_ZN3phi14AllToAllKernelIdNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEPS5_",
       reinterpret_cast<void*>(&AllToAllOnGloo<double>)},
      {"_ZN3phi14AllToAllKernelIiNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEPS5_",
       reinterpret_cast<void*>(&AllToAllOnGloo<int32_t>)},
      {"_ZN3phi14AllToAllKernelIlNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEPS5_",
       reinterpret_cast<void*>(&AllToAllOnGloo<int64_t>)},
      // PSendKernel<T, CPUContext> / PRecvKernel<T, CPUContext>: T only names the instance
      PE_P2P(float, "_ZN3phi11PSendKernelIfNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIfNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(double, "_ZN3phi11PSendKernelIdNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIdNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(int32_t, "_ZN3phi11PSendKernelIiNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIiNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(int64_t, "_ZN3phi11PSendKernelIlNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIlNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(bool, "_ZN3phi11PSendKernelIbNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIbNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(int8_t, "_ZN3phi11PSendKernelIaNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIaNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(uint8_t, "_ZN3phi11PSendKernelIhNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIhNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(int16_t, "_ZN3phi11PSendKernelIsNS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelIsNS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_11DenseTensorE"),
      PE_P2P(phi::dtype::float16,
             "_ZN3phi11PSendKernelINS_5dtype7float16ENS_10CPUContextEEEvRKT0_RKNS_11DenseTensorEib",
             "_ZN3phi11PRecvKernelINS_5dtype7float16ENS_10CPUContextEEEvRKT0_iNS_8DataTypeERKSt6vectorIiSaIiEEbPNS_"
             "11DenseTensorE"),
  };
  return targets;
}

struct Slot {
  void** where;
  void* original;
  bool relro;
};
std::vector<Slot> g_slots;

void Write(void** where, void* value, bool relro) {
  long page = sysconf(_SC_PAGESIZE);
  auto start = reinterpret_cast<uintptr_t>(where) & ~static_cast<uintptr_t>(page - 1);
  // a GOT in the object's RELRO segment is read-only after start-up: open its page for the one
  // write and close it again; a lazily bound GOT stays writable, as the dynamic linker needs it
  PD_CHECK(mprotect(reinterpret_cast<void*>(start), page, PROT_READ | PROT_WRITE) == 0,
           "paddle-ext cpu collectives: cannot make a GOT page writable");
  *where = value;
  if (relro) mprotect(reinterpret_cast<void*>(start), page, PROT_READ);
}

int PatchObject(struct dl_phdr_info* info, size_t, void*) {
  const ElfW(Dyn)* dyn = nullptr;
  uintptr_t relro_begin = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + ph.p_vaddr);
    if (ph.p_type == PT_GNU_RELRO) {
      relro_begin = info->dlpi_addr + ph.p_vaddr;
      relro_end = relro_begin + ph.p_memsz;
    }
  }
  if (dyn == nullptr) return 0;
  uintptr_t base = info->dlpi_addr, jmprel = 0, symtab = 0, strtab = 0;
  size_t relsz = 0;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_JMPREL: jmprel = dyn->d_un.d_ptr; break;
      case DT_PLTRELSZ: relsz = dyn->d_un.d_val; break;
      case DT_SYMTAB: symtab = dyn->d_un.d_ptr; break;
      case DT_STRTAB: strtab = dyn->d_un.d_ptr; break;
      default: break;
    }
  }
  if (!jmprel || !symtab || !strtab) return 0;
  // glibc relocates these addresses in place for ordinary objects; the vDSO keeps them relative
  if (jmprel < base) jmprel += base;
  if (symtab < base) symtab += base;
  if (strtab < base) strtab += base;
  auto* rel = reinterpret_cast<const ElfW(Rela)*>(jmprel);
  auto* syms = reinterpret_cast<const ElfW(Sym)*>(symtab);
  auto* strs = reinterpret_cast<const char*>(strtab);
  for (size_t i = 0; i < relsz / sizeof(ElfW(Rela)); ++i) {
    if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT) continue;
    const char* name = strs + syms[ELF64_R_SYM(rel[i].r_info)].st_name;
    for (const auto& target : Targets()) {
      if (std::strcmp(name, target.first) != 0) continue;
      auto** where = reinterpret_cast<void**>(base + rel[i].r_offset);
      if (*where == target.second) continue;
      // Paddle's kernel, or (a slot not bound yet) the PLT stub that binds it: either restores it
      auto addr = reinterpret_cast<uintptr_t>(where);
      bool relro = addr >= relro_begin && addr < relro_end;
      g_slots.push_back({where, *where, relro});
      Write(where, target.second, relro);
    }
  }
  return 0;
}
}  // namespace

// Point every loaded library's GOT slots for ReduceScatterKernel<T, CPUContext> and
// AllToAllKernel<T, CPUContext> at the gloo replacements; returns how many slots point there now (0: nothing imports it through a PLT).
int hook() {
#if !defined(__x86_64__)
  return 0;  // the slots are found by x86-64 relocation type; elsewhere Paddle's kernel stays
#endif
  if (g_slots.empty()) dl_iterate_phdr(PatchObject, nullptr);
  return static_cast<int>(g_slots.size());
}

// Put Paddle's kernels back; returns how many slots were restored.
int unhook() {
  int n = static_cast<int>(g_slots.size());
  for (const auto& slot : g_slots) Write(slot.where, slot.original, slot.relro);
  g_slots.clear();
  return n;
}

int64_t calls() { return g_calls.load(); }

PYBIND11_MODULE(paddle_ext_cpu_collectives, m) {
  m.def("hook", &hook);
  m.def("unhook", &unhook);
  m.def("calls", &calls);
}
