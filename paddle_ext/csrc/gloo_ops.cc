// paddle-ext: gloo collectives that find their communicator by ring id when they run, and the
// pipeline's point-to-point messages on a TCP socket per channel (SocketChannel, below) or on gloo.
//
// Why a C++ op: on CPU every static collective kernel reads its communicator from the one shared
// CPU DeviceContext, and the executor binds it only if none is bound yet (SetDeviceCommContext:
// "if (!dev_ctx->GetCommContext())"). So the first collective built in a process fixes the
// communicator of every later one: all rings collapse into one (right only when every group has
// the same ranks in the same order), and send_v2/recv_v2 have no CPU kernel at all. These ops
// look their ring up in CommContextManager when they run.
//
// Built by paddle_ext/compat/native/cpp_build.py (piece "gloo_ops") against the installed Paddle's
// headers; used by paddle_ext/compat/ports/static_collectives.py, which rewrites a program's
// send_v2/recv_v2/all_reduce/all_gather/broadcast/reduce_scatter into the pe_gloo_* ops below.
//
// reduce_scatter: the wheel exports no gloo reduce-scatter (GlooCommContext has none), so the op
// all-reduces the whole tensor and keeps this rank's block of dim 0 (block i for the i-th member
// of the ring, as Paddle's kernel). The sum is the all_reduce's, so the block is exact; the
// traffic is an all_reduce's rather than a reduce-scatter's.
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "paddle/extension.h"
#include "paddle/phi/core/dense_tensor.h"
#include "paddle/phi/core/distributed/comm_context_manager.h"

namespace phi {
namespace distributed {
// The wheel ships gloo_comm_context.h but not gloo's headers: declare the exported members.
class GlooCommContext : public CommContext {
 public:
  void Broadcast(phi::DenseTensor* out, const phi::DenseTensor& in, int root, uint32_t tag);
  void AllReduce(phi::DenseTensor* out, const phi::DenseTensor& in, int reduce_type, uint32_t tag);  // 0: sum
  void AllGather(phi::DenseTensor* out, const phi::DenseTensor& in, uint32_t tag);
  void Send(const phi::DenseTensor& in, int dst, uint32_t tag);
  void Recv(phi::DenseTensor* out, int src, uint32_t tag);
};
}  // namespace distributed
}  // namespace phi

namespace {
phi::distributed::GlooCommContext* Ring(const std::string& key) {
  auto& manager = phi::distributed::CommContextManager::GetInstance();
  PD_CHECK(manager.Has(key), "paddle-ext gloo op: no communicator ", key,
           "; Engine._init_comm (patched by paddle-ext) creates one per group of this rank");
  return static_cast<phi::distributed::GlooCommContext*>(manager.Get(key));
}
phi::DenseTensor* Dense(const paddle::Tensor& t) { return static_cast<phi::DenseTensor*>(t.impl().get()); }

template <typename F>
void Call(const char* what, const std::string& ring_id, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    PD_THROW("paddle-ext gloo ", what, " on ring ", ring_id, " failed: ", e.what());
  }
}

// A send channel: the op enqueues a copy and returns (like NCCL's asynchronous send); one
// thread per ring performs the blocking gloo sends in order. A rank then only ever waits in a
// receive, so any job order whose per-channel send and receive orders agree cannot deadlock.
struct SendQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<paddle::Tensor, int>> items;
  std::string error;
};

// A channel's thread is named (pe_gloo_send, pe_gloo_recv: top -H, /proc/<pid>/task/<tid>/comm).
// With PADDLE_EXT_COMM_CPUS set ("0,1": run_ranks(pin_cpus="compute")) it runs on those CPUs,
// not on the one CPU of the compute thread that started it: a queued message then does not wait
// for this rank's compute to leave its CPU.
void FreeFromCompute(const char* name) {
  pthread_setname_np(pthread_self(), name);
  const char* list = std::getenv("PADDLE_EXT_COMM_CPUS");
  if (list == nullptr || *list == '\0') return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const char* p = list; *p != '\0';) {
    char* end = nullptr;
    long cpu = std::strtol(p, &end, 10);
    if (end == p) break;  // not a number: leave the thread where it is
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(static_cast<int>(cpu), &set);
    p = (*end == ',') ? end + 1 : end;
  }
  if (CPU_COUNT(&set) > 0) pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// A short scheduler slice for this thread (Linux >= 6.12, EEVDF: a woken thread whose slice is
// shorter than the running one's preempts it). The send thread wakes for every message and runs
// for microseconds; with the default slice (1.4 ms on a 2-CPU machine) a message sent while this
// rank computes waited up to a slice for it, on the critical path of every pipeline schedule
// that hands a micro-batch to the other rank and waits for the answer (docs/static_engine.md,
// "Eighth pass"). PADDLE_EXT_COMM_SLICE_US (default 100; 0 keeps the kernel's slice) sets it;
// only a SCHED_OTHER thread is touched, with its nice value kept; older kernels ignore the slice.
// static_collectives.py's short_slice does the same for gloo's I/O threads.
void ShortSlice() {
#ifdef SYS_sched_setattr
  const char* text = std::getenv("PADDLE_EXT_COMM_SLICE_US");
  char* end = nullptr;
  long us = (text == nullptr || *text == '\0') ? 100 : std::strtol(text, &end, 10);
  if (end != nullptr && (end == text || *end != '\0')) us = 100;  // not a number: the default, as short_slice
  if (us <= 0 || sched_getscheduler(0) != SCHED_OTHER) return;
  struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
  } attr = {48, SCHED_OTHER, 0, 0, 0, 0, 0, 0};
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, 0);  // this thread's (Linux: per thread)
  if (errno != 0) return;
  attr.nice = nice;
  attr.runtime = static_cast<uint64_t>(us) * 1000;
  syscall(SYS_sched_setattr, 0, &attr, 0);  // best effort: a refusal leaves the default slice
#endif
}

void Drain(std::string ring_id, SendQueue* q) {
  FreeFromCompute("pe_gloo_send");
  ShortSlice();
  for (;;) {
    std::pair<paddle::Tensor, int> item;
    {
      std::unique_lock<std::mutex> lock(q->mu);
      q->cv.wait(lock, [q] { return !q->items.empty(); });
      item = q->items.front();
    }
    try {
      Ring(ring_id)->Send(*Dense(item.first), item.second, 0);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(q->mu);
      q->error = e.what();
    }
    std::lock_guard<std::mutex> lock(q->mu);
    q->items.pop_front();
    q->cv.notify_all();
  }
}

// A receive channel, posted ahead. A recv op that carries its ring's plan (the byte sizes of the
// ring's receives in one step, in order: the pipeline's job list fixes it) hands the whole
// step's plan to one thread per ring at the step's first receive; the thread posts each gloo
// receive as soon as the one before has landed, so a message sent while this rank computes
// lands while it computes (gloo moves a message's data only once its receive is posted: a late
// post costs a hand-off through the sender's I/O thread, 0.3 ms on a loaded 2-CPU machine; docs/
// static_engine.md, "Tenth pass"). The thread posts no more than the step's plan: nothing is
// left posted between steps, so nothing can wait for a message that never comes.
struct RecvQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<int64_t> to_post;        // byte sizes the thread has still to receive, in order
  std::deque<paddle::Tensor> landed;  // received, not yet taken by an op
  std::vector<int64_t> plan;          // the step's plan, set at its first receive
  size_t next = 0;                    // the op side: index of the next receive in the plan
  std::string error;
};

void ReceiveAhead(std::string ring_id, int peer, RecvQueue* q) {
  FreeFromCompute("pe_gloo_recv");
  ShortSlice();
  for (;;) {
    int64_t nbytes = 0;
    {
      std::unique_lock<std::mutex> lock(q->mu);
      q->cv.wait(lock, [q] { return !q->to_post.empty(); });
      nbytes = q->to_post.front();
    }
    auto buffer = paddle::empty({nbytes}, paddle::DataType::UINT8, paddle::CPUPlace());
    std::string error;
    try {
      Ring(ring_id)->Recv(Dense(buffer), peer, 0);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(q->mu);
    if (error.empty()) {
      q->to_post.pop_front();
      q->landed.push_back(buffer);
    } else {
      q->error = error;
      q->to_post.clear();
    }
    q->cv.notify_all();
  }
}

// A ring's channel (a SendQueue or a RecvQueue), made with its thread (`start`) on first use.
template <typename Queue>
Queue* ChannelOf(const std::string& ring_id, const std::function<void(Queue*)>& start) {
  static std::mutex mu;
  static auto* queues = new std::unordered_map<std::string, Queue*>();  // never freed: threads outlive exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = queues->find(ring_id);
  if (it != queues->end()) return it->second;
  auto* q = new Queue();
  (*queues)[ring_id] = q;
  start(q);
  return q;
}

RecvQueue* RecvQueueOf(const std::string& ring_id, int peer) {
  return ChannelOf<RecvQueue>(ring_id, [&](RecvQueue* q) { std::thread(ReceiveAhead, ring_id, peer, q).detach(); });
}

SendQueue* QueueOf(const std::string& ring_id) {
  return ChannelOf<SendQueue>(ring_id, [&](SendQueue* q) { std::thread(Drain, ring_id, q).detach(); });
}
// A point-to-point channel on a plain TCP socket (p2p_sockets.py connects one per channel and
// names its descriptor in PADDLE_EXT_P2P_FD_<sender>_<receiver>; PADDLE_EXT_P2P_SOCKETS=0 keeps
// gloo). The kernel's socket buffers do what the gloo path needs two threads per channel for:
// a send op writes what the socket takes at once and returns, a message sent before its receive
// waits in the receiver's buffer, and the receive op reads it straight into its output. Only a
// message the socket cannot take at once (its buffer full of unread messages) goes to the
// channel's thread (started then), and every later one behind it while any is left, so a send
// never waits for its receiver.
struct SocketChannel {
  int fd = -1;
  bool writer = false;  // the channel's thread, started the first time a socket is full
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<paddle::Tensor, size_t>> pending;  // a copy, and its bytes already written
  std::string error;
};

int SocketFd(const std::string& ring_id) {
  auto at = ring_id.find("p2p:");
  if (at == std::string::npos) return -1;
  std::string pair = ring_id.substr(at + 4);
  auto gt = pair.find('>');
  if (gt == std::string::npos) return -1;
  std::string name = "PADDLE_EXT_P2P_FD_" + pair.substr(0, gt) + "_" + pair.substr(gt + 1);
  const char* text = std::getenv(name.c_str());
  return (text != nullptr && *text != '\0') ? std::atoi(text) : -1;
}

size_t WriteSome(int fd, const char* data, size_t n, bool wait, const std::string& ring_id) {
  size_t done = 0;
  while (done < n) {
    ssize_t k = ::send(fd, data + done, n - done, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && !wait && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    PD_CHECK(k > 0, "paddle-ext p2p socket send on ", ring_id, " failed: ", std::strerror(errno),
             " (the peer's process ended?). PADDLE_EXT_P2P_SOCKETS=0 sends through gloo");
    done += static_cast<size_t>(k);
  }
  return done;
}

int TimeoutMs() {
  const char* text = std::getenv("PADDLE_EXT_P2P_TIMEOUT_S");
  long s = (text == nullptr || *text == '\0') ? 1800 : std::strtol(text, nullptr, 10);
  return s > 0 ? static_cast<int>(s * 1000) : -1;
}

void ReadAll(int fd, char* data, size_t n, const std::string& ring_id) {
  static const int timeout_ms = TimeoutMs();
  while (n > 0) {
    struct pollfd p = {fd, POLLIN, 0};
    int ready = ::poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    PD_CHECK(ready != 0, "paddle-ext p2p socket receive on ", ring_id, ": no data for ", timeout_ms / 1000,
             " s (PADDLE_EXT_P2P_TIMEOUT_S); the peer is stuck or its job list does not send this message");
    ssize_t k = ::read(fd, data, n);
    if (k < 0 && errno == EINTR) continue;
    PD_CHECK(k > 0, "paddle-ext p2p socket receive on ", ring_id, " failed: ",
             k == 0 ? "the peer closed the channel (its process ended?)" : std::strerror(errno));
    data += k;
    n -= static_cast<size_t>(k);
  }
}

void SocketDrain(std::string ring_id, SocketChannel* c) {
  FreeFromCompute("pe_gloo_send");
  ShortSlice();
  for (;;) {
    std::pair<paddle::Tensor, size_t> item;
    {
      std::unique_lock<std::mutex> lock(c->mu);
      c->cv.wait(lock, [c] { return !c->pending.empty(); });
      item = c->pending.front();
    }
    const auto* data = static_cast<const char*>(Dense(item.first)->data());
    size_t n = static_cast<size_t>(item.first.numel()) * phi::SizeOf(item.first.dtype());
    std::string error;
    try {
      WriteSome(c->fd, data + item.second, n - item.second, true, ring_id);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(c->mu);
    if (!error.empty()) c->error = error;
    c->pending.pop_front();
    c->cv.notify_all();
  }
}

// The ring's socket channel, or nullptr when it has no socket (the gloo path).
SocketChannel* SocketOf(const std::string& ring_id) {
  static std::mutex mu;
  static auto* channels = new std::unordered_map<std::string, SocketChannel*>();  // never freed, as ChannelOf
  std::lock_guard<std::mutex> lock(mu);
  auto it = channels->find(ring_id);
  if (it != channels->end()) return it->second;
  SocketChannel* c = nullptr;
  int fd = SocketFd(ring_id);
  if (fd >= 0) {
    c = new SocketChannel();
    c->fd = fd;
  }
  (*channels)[ring_id] = c;
  return c;
}

void SocketSend(SocketChannel* c, const paddle::Tensor& x, const std::string& ring_id) {
  const auto* data = static_cast<const char*>(Dense(x)->data());
  size_t n = static_cast<size_t>(x.numel()) * phi::SizeOf(x.dtype());
  {
    std::lock_guard<std::mutex> lock(c->mu);
    PD_CHECK(c->error.empty(), "paddle-ext p2p socket send on ", ring_id, " failed: ", c->error);
    size_t done = c->pending.empty() ? WriteSome(c->fd, data, n, false, ring_id) : 0;
    if (done == n) return;
    c->pending.emplace_back(x.copy_to(x.place(), true), done);
    if (!c->writer) {
      c->writer = true;
      std::thread(SocketDrain, ring_id, c).detach();
    }
  }
  c->cv.notify_all();
}
}  // namespace

std::vector<paddle::Tensor> Send(const paddle::Tensor& x, const std::string& ring_id, int peer) {
  if (SocketChannel* c = SocketOf(ring_id)) {
    SocketSend(c, x, ring_id);
    return {paddle::full({1}, 0, x.dtype(), x.place())};
  }
  SendQueue* q = QueueOf(ring_id);
  auto copy = x.copy_to(x.place(), true);
  {
    std::lock_guard<std::mutex> lock(q->mu);
    PD_CHECK(q->error.empty(), "paddle-ext gloo send on ring ", ring_id, " failed: ", q->error);
    q->items.emplace_back(copy, peer);
  }
  q->cv.notify_all();
  return {paddle::full({1}, 0, x.dtype(), x.place())};
}
std::vector<paddle::Tensor> Recv(const paddle::Tensor& like, const std::string& ring_id, int peer,
                                 const std::vector<int64_t>& plan) {
  auto out = paddle::empty(like.shape(), like.dtype(), like.place());
  if (SocketChannel* c = SocketOf(ring_id)) {
    ReadAll(c->fd, static_cast<char*>(Dense(out)->data()),
            static_cast<size_t>(out.numel()) * phi::SizeOf(out.dtype()), ring_id);
    return {out};
  }
  if (plan.empty()) {  // no plan (dynamic shapes, or PADDLE_EXT_RECV_AHEAD=0): a blocking receive
    Call("recv", ring_id, [&] { Ring(ring_id)->Recv(Dense(out), peer, 0); });
    return {out};
  }
  RecvQueue* q = RecvQueueOf(ring_id, peer);
  const int64_t nbytes = out.numel() * static_cast<int64_t>(phi::SizeOf(out.dtype()));
  paddle::Tensor landed;
  {
    std::unique_lock<std::mutex> lock(q->mu);
    PD_CHECK(q->error.empty(), "paddle-ext gloo recv on ring ", ring_id, " failed: ", q->error);
    if (q->next == 0) {  // the step's first receive on this ring: post the whole step
      q->plan = plan;
      q->to_post.assign(plan.begin(), plan.end());
      q->cv.notify_all();
    }
    PD_CHECK(q->plan == plan && q->plan[q->next] == nbytes, "paddle-ext gloo recv on ring ", ring_id,
             ": receive ", q->next, " of the step expects ", q->plan[q->next], " bytes from its plan, this one ",
             nbytes, "; the job list ran out of the order it was planned in (a step cut short?). "
             "PADDLE_EXT_RECV_AHEAD=0 receives without a plan");
    q->cv.wait(lock, [q] { return !q->landed.empty() || !q->error.empty(); });
    PD_CHECK(q->error.empty(), "paddle-ext gloo recv on ring ", ring_id, " failed: ", q->error);
    landed = q->landed.front();
    q->landed.pop_front();
    q->next = (q->next + 1) % q->plan.size();
  }
  std::memcpy(Dense(out)->data(), Dense(landed)->data(), static_cast<size_t>(nbytes));
  return {out};
}
std::vector<paddle::Tensor> AllReduce(const paddle::Tensor& x, const std::string& ring_id, int reduce_op) {
  auto out = paddle::empty(x.shape(), x.dtype(), x.place());
  Call("all_reduce", ring_id, [&] { Ring(ring_id)->AllReduce(Dense(out), *Dense(x), reduce_op, 0); });
  return {out};
}
std::vector<paddle::Tensor> AllGather(const paddle::Tensor& x, const std::string& ring_id, int nranks) {
  auto shape = x.shape();
  shape[0] *= nranks;
  auto out = paddle::empty(shape, x.dtype(), x.place());
  Call("all_gather", ring_id, [&] { Ring(ring_id)->AllGather(Dense(out), *Dense(x), 0); });
  return {out};
}
std::vector<paddle::Tensor> ReduceScatter(const paddle::Tensor& x, const std::string& ring_id, int nranks) {
  auto* ring = Ring(ring_id);
  auto shape = x.shape();
  PD_CHECK(!shape.empty() && nranks == ring->GetSize() && shape[0] % nranks == 0,
           "paddle-ext gloo reduce_scatter on ring ", ring_id, ": dim 0 of the input (",
           shape.empty() ? 0 : shape[0], ") must split evenly over ", nranks, " ranks, the ring's size (",
           ring->GetSize(), ")");
  auto sum = paddle::empty(shape, x.dtype(), x.place());
  Call("reduce_scatter", ring_id, [&] { ring->AllReduce(Dense(sum), *Dense(x), 0, 0); });  // 0: sum
  int64_t block = shape[0] / nranks, first = block * ring->GetRank();
  return {sum.slice(first, first + block).copy_to(x.place(), true)};
}
std::vector<paddle::Tensor> Broadcast(const paddle::Tensor& x, const std::string& ring_id, int root) {
  auto out = paddle::empty(x.shape(), x.dtype(), x.place());
  Call("broadcast", ring_id, [&] { Ring(ring_id)->Broadcast(Dense(out), *Dense(x), root, 0); });
  return {out};
}

std::vector<std::vector<int64_t>> SameShape(const std::vector<int64_t>& x) { return {x}; }
std::vector<std::vector<int64_t>> OneShape(const std::vector<int64_t>& x) { return {{1}}; }
std::vector<std::vector<int64_t>> GatherShape(const std::vector<int64_t>& x, const std::string& ring_id, int nranks) {
  auto s = x;
  if (!s.empty() && s[0] > 0) s[0] *= nranks;
  return {s};
}
std::vector<std::vector<int64_t>> ScatterShape(const std::vector<int64_t>& x, const std::string& ring_id, int nranks) {
  auto s = x;
  if (!s.empty() && s[0] > 0) s[0] /= nranks;
  return {s};
}
std::vector<paddle::DataType> SameType(const paddle::DataType& t) { return {t}; }

// An op of one input X and one output Out, its attributes the ring's name and then `...`. A shape
// function may ignore the attributes (SameShape serves ops of any).
#define PE_OP(name, fn, shape, ...)                                                     \
  PD_BUILD_OP(name).Inputs({"X"}).Outputs({"Out"}).Attrs({"ring: std::string", __VA_ARGS__})  \
      .SetKernelFn(PD_KERNEL(fn)).SetInferShapeFn(PD_INFER_SHAPE(shape))                 \
      .SetInferDtypeFn(PD_INFER_DTYPE(SameType))
PE_OP(pe_gloo_send, Send, OneShape, "peer: int");
PE_OP(pe_gloo_recv, Recv, SameShape, "peer: int", "plan: std::vector<int64_t>");
PE_OP(pe_gloo_all_reduce, AllReduce, SameShape, "reduce_op: int");
PE_OP(pe_gloo_all_gather, AllGather, GatherShape, "nranks: int");
PE_OP(pe_gloo_broadcast, Broadcast, SameShape, "root: int");
PE_OP(pe_gloo_reduce_scatter, ReduceScatter, ScatterShape, "nranks: int");
