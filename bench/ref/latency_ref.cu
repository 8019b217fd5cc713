// Independent CUDA C (runtime API) reference for the latency probes and the
// peer copy bandwidth probes of `gpulink_exporter probe`, for
// bench/probe-accuracy.sh.
//
// Build (on the GPU machine, CUDA 12 or 13):
//   nvcc -O2 -std=c++17 -arch=sm_90 -o latency_ref bench/ref/latency_ref.cu
// Run:
//   [numactl --membind=N] latency_ref [--kinds host,peer,launch,peer_bw] [--node N]
//       [--gpus 0,1] [--size BYTES] [--batch N] [--warmup N]
//       [--chase-size BYTES] [--stride BYTES] [--hops N] [--samples N]
//
//   host_latency    one GPU thread chases pointers through a 2 MiB
//                   (--chase-size) pinned, mapped host buffer (cudaHostAlloc
//                   mapped): a random cyclic permutation of nodes 128 bytes
//                   apart, each load ld.global.cv (no GPU cache). Per-hop
//                   time, from %globaltimer around the chase inside the
//                   kernel (CUDA events around the launch are reported beside
//                   it). Median of --samples kernels after one warm-up lap of
//                   the cycle.                                  kinds: host
//   peer_latency    the same chase in GPU j's memory by GPU i, peer access on;
//                   every ordered pair.                         kinds: peer
//   launch_latency  empty kernel <<<1,1>>> on a stream then
//                   cudaStreamSynchronize, host steady_clock, median of 1000
//                   after 100 warm-up.                          kinds: launch
//   peer_copy       (direction to_peer) GPU i's copy engine writes into GPU
//                   j: cudaMemcpyAsync (cudaMemcpyDefault, UVA) from a buffer
//                   on i to a buffer on j on a stream of GPU i, peer access
//                   enabled both ways; every ordered pair.      kinds: peer_bw
//   peer_bidirectional
//                   a stream of i writes i -> j while a stream of j writes
//                   j -> i. Each direction is measured in its own samples: the
//                   measured stream queues --batch (L) copies, the other one
//                   ceil(1.5 L) + 1 so it is still copying when the measured
//                   copies end; only the measured stream is timed. --samples
//                   samples measuring i -> j (to_peer of GPU i, peer j), then
//                   --samples measuring j -> i (from_peer). Every ordered
//                   pair, so each GPU has its own to_peer and from_peer.
//                                                               kinds: peer_bw
// Peer copy timing: one sample is --batch (default 16) copies of --size
// (default 64 MiB) bytes queued behind a spin kernel on the first stream (GPU
// i's); a spin kernel waits on a flag in mapped pinned host memory (with a
// %globaltimer timeout) and the host sets the flag once everything is
// queued; another GPU's stream waits on an event recorded behind the spin,
// so all streams start together and no enqueue time is timed. CUDA events on
// the measured stream around its copies; the median of --samples (default 7)
// samples after --warmup (default 2) untimed ones; bytes/s of bytes copied,
// GB/s decimal (1e9). Unlike PyTorch's cross-device copy_, nothing but the
// copies and the events goes on the streams (no cross-stream syncs per copy).
//
// The host buffer lands where the process's memory policy puts it: run under
// numactl --membind=N and pass --node N to label the results.
// CUDA ordinals are taken in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID is
// set before the runtime starts unless the caller set it). Prints one JSON
// object whose results use probes.Result's field names (probe, direction,
// peer, host_numa_node, size_bytes, samples, seconds or bytes_per_second)
// plus gpu, peer_gpu and pci_bus_id; a measurement that fails carries
// "error" and the rest go on.
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

__device__ __forceinline__ unsigned long long load_cv(unsigned long long addr) {
  unsigned long long v;
  // .cv: do not cache, fetch again: every hop goes to the memory itself.
  asm volatile("ld.global.cv.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread follows the chain from start for hops loads. out[0] gets the
// last address (so the chase cannot be dropped), out[1] the nanoseconds the
// chase took by the GPU's global timer.
__global__ void chase(unsigned long long start, unsigned long long hops, unsigned long long *out) {
  unsigned long long p = start;
  unsigned long long t0 = globaltimer();
  for (unsigned long long i = 0; i < hops; ++i) p = load_cv(p);
  unsigned long long t1 = globaltimer();
  out[0] = p;
  out[1] = t1 - t0;
}

__global__ void empty_kernel() {}

// The gate of a timed copy sample: spins until the host sets *open (mapped
// pinned host memory, read through volatile so every poll goes to memory),
// or gives up after timeout_ns by the global timer and sets *timed_out.
__global__ void spin_gate(const volatile unsigned int *open, unsigned long long timeout_ns,
                          volatile unsigned int *timed_out) {
  unsigned long long t0 = globaltimer();
  while (*open == 0) {
    if (globaltimer() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

namespace {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudaError_t e, const char *what, int line) {
  if (e != cudaSuccess) {
    throw CudaError(std::string(what) + " (line " + std::to_string(line) + "): " + cudaGetErrorName(e) + ": " +
                    cudaGetErrorString(e));
  }
}
#define CK(x) check((x), #x, __LINE__)

struct Opts {
  bool host = true, peer = true, launch = true, peer_bw = true;
  int node = -2;  // -2: not given
  std::vector<int> gpus;
  size_t chase_size = 2u << 20;  // pointer-chase buffer
  size_t stride = 128;
  unsigned long long hops = 20000;
  int samples = 7;  // latency kernels and peer copy samples alike
  int launch_samples = 1000, launch_warmup = 100;
  size_t copy_size = 64u << 20;  // bytes per peer copy
  int batch = 16;                // copies per timed peer sample (L)
  int warmup = 2;                // untimed peer samples before the timed ones
};

// How the spin gate bounds a sample: queueing one sample's copies takes well
// under a millisecond; a gate still shut after this long means the host died
// or hung, and the sample is an error rather than a GPU held forever.
constexpr unsigned long long kGateTimeoutNs = 5ull * 1000 * 1000 * 1000;

// Copies the other direction queues in a bidirectional sample measuring L:
// ceil(1.5 L) + 1, so it is still copying when the measured copies end.
int loaded_copies(int l) { return (3 * l + 1) / 2 + 1; }

// Fills host with a random single cycle over size/stride nodes stride bytes
// apart; each node's first 8 bytes hold the device address (base + offset)
// of the next node. Returns the chain's first address.
unsigned long long build_chain(unsigned char *host, unsigned long long base, size_t size, size_t stride,
                               unsigned seed) {
  size_t n = size / stride;
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = k;
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);  // a random order; closing it makes one cycle
  std::memset(host, 0, size);
  for (size_t k = 0; k < n; ++k) {
    unsigned long long next = base + order[(k + 1) % n] * stride;
    std::memcpy(host + order[k] * stride, &next, sizeof next);
  }
  return base + order[0] * stride;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string json_str(const std::string &s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string json_nums(const std::vector<double> &v) {
  std::string o = "[";
  for (size_t k = 0; k < v.size(); ++k) {
    char b[40];
    std::snprintf(b, sizeof b, "%s%.6e", k ? ", " : "", v[k]);
    o += b;
  }
  return o + "]";
}

std::string bus_id(int dev) {
  char b[64] = {0};
  if (cudaDeviceGetPCIBusId(b, sizeof b, dev) != cudaSuccess) return "";
  std::string s(b);
  for (auto &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Chase {
  double per_hop_s;                       // median, globaltimer
  double per_hop_event_s;                 // median, CUDA events around the kernel
  std::vector<double> all, all_event;     // every sample, per hop
};

// Runs the chase on the current device: a warm-up lap of the whole cycle,
// then o.samples timed kernels of o.hops loads each.
Chase run_chase(unsigned long long start, const Opts &o) {
  unsigned long long *out = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  Chase r{};
  try {
    CK(cudaMalloc(&out, 2 * sizeof(unsigned long long)));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    chase<<<1, 1, 0, s>>>(start, o.chase_size / o.stride, out);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    for (int k = 0; k < o.samples; ++k) {
      CK(cudaEventRecord(a, s));
      chase<<<1, 1, 0, s>>>(start, o.hops, out);
      CK(cudaGetLastError());
      CK(cudaEventRecord(b, s));
      CK(cudaStreamSynchronize(s));
      unsigned long long h[2];
      CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      r.all.push_back(static_cast<double>(h[1]) * 1e-9 / static_cast<double>(o.hops));
      r.all_event.push_back(static_cast<double>(ms) * 1e-3 / static_cast<double>(o.hops));
    }
  } catch (...) {
    cudaFree(out);
    if (s) cudaStreamDestroy(s);
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    throw;
  }
  cudaFree(out);
  cudaStreamDestroy(s);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  r.per_hop_s = median(r.all);
  r.per_hop_event_s = median(r.all_event);
  return r;
}

struct Out {
  std::vector<std::string> results;

  std::string head(int gpu, const char *kind) {
    return "{\"gpu\": " + std::to_string(gpu) + ", \"pci_bus_id\": " + json_str(bus_id(gpu)) +
           ", \"probe\": " + json_str(kind);
  }
  static std::string peer(int j) {
    return ", \"peer\": " + json_str(bus_id(j)) + ", \"peer_gpu\": " + std::to_string(j);
  }
  void error(int gpu, const char *kind, const std::string &extra, const std::string &msg) {
    results.push_back(head(gpu, kind) + extra + ", \"error\": " + json_str(msg) + "}");
  }
  void chase(int gpu, const char *kind, const std::string &extra, const Opts &o, const Chase &c) {
    char b[256];
    std::snprintf(b, sizeof b,
                  ", \"size_bytes\": %zu, \"stride_bytes\": %zu, \"hops\": %llu, \"samples\": %d, "
                  "\"seconds\": %.6e, \"seconds_by_events\": %.6e",
                  o.chase_size, o.stride, o.hops, o.samples, c.per_hop_s, c.per_hop_event_s);
    results.push_back(head(gpu, kind) + extra + b + ", \"all_seconds\": " + json_nums(c.all) +
                      ", \"all_seconds_by_events\": " + json_nums(c.all_event) + "}");
  }
};

void host_latency(int i, const Opts &o, Out &out) {
  std::string extra = o.node >= -1 ? ", \"host_numa_node\": " + std::to_string(o.node) : "";
  unsigned char *h = nullptr;
  try {
    CK(cudaSetDevice(i));
    CK(cudaHostAlloc(reinterpret_cast<void **>(&h), o.chase_size, cudaHostAllocMapped | cudaHostAllocPortable));
    void *d = nullptr;
    CK(cudaHostGetDevicePointer(&d, h, 0));
    unsigned long long start =
        build_chain(h, reinterpret_cast<unsigned long long>(d), o.chase_size, o.stride, 0x9e3779b9u + i);
    Chase c = run_chase(start, o);
    out.chase(i, "host_latency", extra, o, c);
  } catch (const std::exception &e) {
    out.error(i, "host_latency", extra, e.what());
  }
  if (h) cudaFreeHost(h);
}

// Lets GPU i's contexts reach GPU j's memory (one way); already on is fine.
void enable_peer(int i, int j) {
  int can = 0;
  CK(cudaDeviceCanAccessPeer(&can, i, j));
  if (!can) throw std::runtime_error("cudaDeviceCanAccessPeer(" + std::to_string(i) + ", " + std::to_string(j) +
                                     "): no peer access");
  CK(cudaSetDevice(i));
  cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // clear the (not sticky) error it left behind
  } else {
    CK(e);
  }
}

void peer_latency(int i, int j, const Opts &o, Out &out) {
  std::string extra = Out::peer(j);
  unsigned char *d = nullptr;
  try {
    int can = 0;
    CK(cudaDeviceCanAccessPeer(&can, i, j));
    if (!can) throw std::runtime_error("cudaDeviceCanAccessPeer: no peer access");
    CK(cudaSetDevice(j));
    CK(cudaMalloc(reinterpret_cast<void **>(&d), o.chase_size));
    std::vector<unsigned char> h(o.chase_size);
    unsigned long long start = build_chain(h.data(), reinterpret_cast<unsigned long long>(d), o.chase_size,
                                           o.stride, 0x85ebca6bu + 16 * i + j);
    CK(cudaMemcpy(d, h.data(), o.chase_size, cudaMemcpyHostToDevice));
    enable_peer(i, j);
    CK(cudaSetDevice(i));
    Chase c = run_chase(start, o);
    out.chase(i, "peer_latency", extra, o, c);
  } catch (const std::exception &e) {
    out.error(i, "peer_latency", extra, e.what());
  }
  if (d) {
    cudaSetDevice(j);
    cudaFree(d);
  }
}

// ---- peer copy bandwidth ----

// The host's side of the spin gate: two words of mapped pinned memory (portable:
// every GPU's spin kernel reads the same page). [0] opens the gate, [1] is set
// by a spin that timed out.
struct Gate {
  unsigned int *host = nullptr;
  unsigned int *dev = nullptr;

  Gate() {
    CK(cudaHostAlloc(reinterpret_cast<void **>(&host), 64, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host, 0, 64);
    void *d = nullptr;
    cudaError_t e = cudaHostGetDevicePointer(&d, host, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(host);
      CK(e);
    }
    dev = static_cast<unsigned int *>(d);
  }
  ~Gate() { cudaFreeHost(host); }
  Gate(const Gate &) = delete;
  Gate &operator=(const Gate &) = delete;

  void shut() {
    __atomic_store_n(&host[0], 0u, __ATOMIC_SEQ_CST);
    __atomic_store_n(&host[1], 0u, __ATOMIC_SEQ_CST);
  }
  void open() { __atomic_store_n(&host[0], 1u, __ATOMIC_SEQ_CST); }
  bool timed_out() const { return __atomic_load_n(&host[1], __ATOMIC_SEQ_CST) != 0; }
};

// One stream of copies: n bytes from src to dst, issued on a stream of GPU
// dev (so dev's copy engine does them), with the events that time it.
struct Lane {
  int dev = -1;
  void *dst = nullptr;
  const void *src = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;

  Lane(int dev_, void *dst_, const void *src_) : dev(dev_), dst(dst_), src(src_) {
    try {
      CK(cudaSetDevice(dev));
      CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      CK(cudaEventCreate(&start));
      CK(cudaEventCreate(&end));
    } catch (...) {
      release();
      throw;
    }
  }
  ~Lane() { release(); }
  Lane(const Lane &) = delete;
  Lane &operator=(const Lane &) = delete;

  void release() {
    if (dev < 0) return;
    cudaSetDevice(dev);
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
    if (start) cudaEventDestroy(start);
    if (end) cudaEventDestroy(end);
    s = nullptr;
    start = end = nullptr;
  }
};

// Times copies on one or more lanes, nvbandwidth's way: the first lane's
// stream runs the spin gate, every other lane's stream waits on an event
// recorded behind it, each lane queues its copies, and only then does the
// host open the gate, so all lanes start together and no enqueue time is
// timed.
struct CopyTimer {
  Gate &gate;
  std::vector<Lane *> lanes;
  size_t n;
  cudaEvent_t gone = nullptr;  // on lanes[0]'s GPU, recorded behind the spin

  CopyTimer(Gate &g, std::vector<Lane *> l, size_t bytes) : gate(g), lanes(std::move(l)), n(bytes) {
    if (lanes.size() > 1) {
      CK(cudaSetDevice(lanes[0]->dev));
      CK(cudaEventCreateWithFlags(&gone, cudaEventDisableTiming));
    }
  }
  ~CopyTimer() {
    if (gone) {
      cudaSetDevice(lanes[0]->dev);
      cudaEventDestroy(gone);
    }
  }
  CopyTimer(const CopyTimer &) = delete;
  CopyTimer &operator=(const CopyTimer &) = delete;

  // Waits for every lane's work (the unmeasured lanes' too, so the next
  // sample starts on idle copy engines); errors are left to the caller.
  void drain() {
    for (Lane *l : lanes) {
      cudaSetDevice(l->dev);
      cudaStreamSynchronize(l->s);
    }
  }

  // One sample: lane k queues copies[k] copies; lane measured is timed by
  // its events around its copies. Returns the measured lane's seconds.
  double sample(const std::vector<int> &copies, size_t measured) {
    gate.shut();
    Lane *first = lanes[0];
    try {
      CK(cudaSetDevice(first->dev));
      spin_gate<<<1, 1, 0, first->s>>>(gate.dev, kGateTimeoutNs, gate.dev + 1);
      CK(cudaGetLastError());
      if (gone) CK(cudaEventRecord(gone, first->s));
      for (size_t k = 0; k < lanes.size(); ++k) {
        Lane *l = lanes[k];
        CK(cudaSetDevice(l->dev));
        if (k > 0) CK(cudaStreamWaitEvent(l->s, gone, 0));
        if (k == measured) CK(cudaEventRecord(l->start, l->s));
        for (int c = 0; c < copies[k]; ++c) CK(cudaMemcpyAsync(l->dst, l->src, n, cudaMemcpyDefault, l->s));
        if (k == measured) CK(cudaEventRecord(l->end, l->s));
      }
    } catch (...) {
      gate.open();
      drain();
      throw;
    }
    gate.open();
    Lane *m = lanes[measured];
    CK(cudaSetDevice(m->dev));
    CK(cudaEventSynchronize(m->end));
    for (Lane *l : lanes) {
      CK(cudaSetDevice(l->dev));
      CK(cudaStreamSynchronize(l->s));
    }
    if (gate.timed_out()) throw std::runtime_error("the spin gate timed out before the host opened it");
    float ms = 0;
    CK(cudaSetDevice(m->dev));
    CK(cudaEventElapsedTime(&ms, m->start, m->end));
    if (ms <= 0) throw std::runtime_error("a sample took no measurable time");
    return static_cast<double>(ms) * 1e-3;
  }

  struct Rate {
    double median;
    std::vector<double> all;
  };

  // o.warmup untimed samples, then the median bytes/s of o.samples.
  Rate measure(const std::vector<int> &copies, size_t measured, const Opts &o) {
    for (int k = 0; k < o.warmup; ++k) sample(copies, measured);
    Rate r{};
    for (int k = 0; k < o.samples; ++k) {
      double sec = sample(copies, measured);
      r.all.push_back(static_cast<double>(n) * copies[measured] / sec);
    }
    r.median = median(r.all);
    return r;
  }
};

struct DeviceBuffer {
  int dev = -1;
  void *p = nullptr;
  DeviceBuffer(int d, size_t n, int fill) : dev(d) {
    CK(cudaSetDevice(dev));
    CK(cudaMalloc(&p, n));
    cudaError_t e = cudaMemset(p, fill, n);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      cudaFree(p);
      CK(e);
    }
  }
  ~DeviceBuffer() {
    if (p) {
      cudaSetDevice(dev);
      cudaFree(p);
    }
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
};

std::string bw_fields(const Opts &o, const char *direction, int copies, int loaded, const CopyTimer::Rate &r) {
  char b[320];
  std::snprintf(b, sizeof b,
                ", \"direction\": \"%s\", \"size_bytes\": %zu, \"samples\": %d, \"warmup\": %d, "
                "\"copies\": %d%s, \"peer_access\": true, \"bytes_per_second\": %.6e",
                direction, o.copy_size, o.samples, o.warmup, copies,
                loaded ? (", \"loaded_copies\": " + std::to_string(loaded)).c_str() : "", r.median);
  return b + std::string(", \"all_bytes_per_second\": ") + json_nums(r.all) + "}";
}

// peer_copy (to_peer) and peer_bidirectional (to_peer, from_peer) of GPU i
// with peer j; the gate's spin runs on GPU i's stream.
void peer_bandwidth(int i, int j, const Opts &o, Gate *gate, const std::string &gate_err, Out &out) {
  std::string extra = Out::peer(j);
  auto fail = [&](const char *kind, const char *dir, const std::string &msg) {
    out.error(i, kind, extra + ", \"direction\": " + json_str(dir), msg);
  };
  auto fail_all = [&](const std::string &msg) {
    fail("peer_copy", "to_peer", msg);
    fail("peer_bidirectional", "to_peer", msg);
    fail("peer_bidirectional", "from_peer", msg);
  };
  if (!gate) return fail_all(gate_err);
  try {
    enable_peer(i, j);
    enable_peer(j, i);
    // to_j: written by i into j; to_i: written by j into i.
    DeviceBuffer src_i(i, o.copy_size, 1), to_i(i, o.copy_size, 0);
    DeviceBuffer src_j(j, o.copy_size, 2), to_j(j, o.copy_size, 0);
    Lane li(i, to_j.p, src_i.p), lj(j, to_i.p, src_j.p);
    const int l = o.batch, load = loaded_copies(o.batch);
    try {
      CopyTimer t(*gate, {&li}, o.copy_size);
      CopyTimer::Rate r = t.measure({l}, 0, o);
      out.results.push_back(out.head(i, "peer_copy") + extra + bw_fields(o, "to_peer", l, 0, r));
    } catch (const std::exception &e) {
      fail("peer_copy", "to_peer", e.what());
    }
    try {
      CopyTimer t(*gate, {&li, &lj}, o.copy_size);
      CopyTimer::Rate to = t.measure({l, load}, 0, o);    // i -> j measured, j -> i loading
      CopyTimer::Rate from = t.measure({load, l}, 1, o);  // j -> i measured, i -> j loading
      out.results.push_back(out.head(i, "peer_bidirectional") + extra + bw_fields(o, "to_peer", l, load, to));
      out.results.push_back(out.head(i, "peer_bidirectional") + extra + bw_fields(o, "from_peer", l, load, from));
    } catch (const std::exception &e) {
      fail("peer_bidirectional", "to_peer", e.what());
      fail("peer_bidirectional", "from_peer", e.what());
    }
  } catch (const std::exception &e) {
    fail_all(e.what());
  }
}

void launch_latency(int i, const Opts &o, Out &out) {
  cudaStream_t s = nullptr;
  try {
    CK(cudaSetDevice(i));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<double> v;
    for (int k = 0; k < o.launch_warmup + o.launch_samples; ++k) {
      auto t0 = std::chrono::steady_clock::now();
      empty_kernel<<<1, 1, 0, s>>>();
      CK(cudaGetLastError());
      CK(cudaStreamSynchronize(s));
      auto t1 = std::chrono::steady_clock::now();
      if (k >= o.launch_warmup) v.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    char b[256];
    std::snprintf(b, sizeof b,
                  ", \"samples\": %d, \"seconds\": %.6e, \"p10_seconds\": %.6e, \"p90_seconds\": %.6e, "
                  "\"min_seconds\": %.6e, \"max_seconds\": %.6e}",
                  o.launch_samples, median(v), sorted[sorted.size() / 10], sorted[sorted.size() * 9 / 10],
                  sorted.front(), sorted.back());
    out.results.push_back(out.head(i, "launch_latency") + b);
  } catch (const std::exception &e) {
    out.error(i, "launch_latency", "", e.what());
  }
  if (s) cudaStreamDestroy(s);
}

[[noreturn]] void usage(const char *msg) {
  std::fprintf(stderr,
               "latency_ref: %s\nusage: latency_ref [--kinds host,peer,launch,peer_bw] [--node N] [--gpus 0,1] "
               "[--size BYTES] [--batch N] [--warmup N] [--chase-size BYTES] [--stride BYTES] [--hops N] "
               "[--samples N]\n"
               "  kinds (default all): host = host_latency, peer = peer_latency, launch = launch_latency,\n"
               "  peer_bw = peer_copy and peer_bidirectional bandwidth\n"
               "  --size: bytes per peer copy (default 64 MiB); --chase-size: pointer-chase buffer (default 2 MiB)\n"
               "  --batch: copies per timed peer sample (default 16); --warmup: untimed peer samples (default 2)\n"
               "  --samples: latency kernels and timed peer samples (default 7)\n",
               msg);
  std::exit(2);
}

Opts parse(int argc, char **argv) {
  Opts o;
  for (int k = 1; k < argc; ++k) {
    std::string a = argv[k];
    std::string v;
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (k + 1 < argc) {
      v = argv[++k];
    } else {
      usage(("missing value for " + a).c_str());
    }
    try {
      if (a == "--kinds") {
        o.host = o.peer = o.launch = o.peer_bw = false;
        size_t p = 0;
        while (p <= v.size()) {
          size_t c = v.find(',', p);
          if (c == std::string::npos) c = v.size();
          std::string kind = v.substr(p, c - p);
          if (kind == "host") {
            o.host = true;
          } else if (kind == "peer") {
            o.peer = true;
          } else if (kind == "launch") {
            o.launch = true;
          } else if (kind == "peer_bw") {
            o.peer_bw = true;
          } else if (kind == "all") {
            o.host = o.peer = o.launch = o.peer_bw = true;
          } else {
            usage(("unknown kind " + json_str(kind) + " (host, peer, launch, peer_bw, all)").c_str());
          }
          p = c + 1;
        }
      } else if (a == "--node") {
        o.node = std::stoi(v);
      } else if (a == "--gpus") {
        if (v != "all") {
          size_t p = 0;
          while (p <= v.size()) {
            size_t c = v.find(',', p);
            if (c == std::string::npos) c = v.size();
            o.gpus.push_back(std::stoi(v.substr(p, c - p)));
            p = c + 1;
          }
        }
      } else if (a == "--size") {
        o.copy_size = std::stoull(v);
      } else if (a == "--chase-size") {
        o.chase_size = std::stoull(v);
      } else if (a == "--batch") {
        o.batch = std::stoi(v);
      } else if (a == "--warmup") {
        o.warmup = std::stoi(v);
      } else if (a == "--stride") {
        o.stride = std::stoull(v);
      } else if (a == "--hops") {
        o.hops = std::stoull(v);
      } else if (a == "--samples") {
        o.samples = std::stoi(v);
      } else {
        usage(("unknown flag " + a).c_str());
      }
    } catch (const std::logic_error &) {
      usage(("bad value for " + a).c_str());
    }
  }
  if (o.stride < 8 || o.chase_size < 2 * o.stride || o.hops == 0 || o.samples < 1)
    usage("bad chase size, stride, hops or samples");
  if (o.copy_size == 0 || o.batch < 1 || o.batch > 1 << 16 || o.warmup < 0) usage("bad size, batch or warmup");
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  Opts o = parse(argc, argv);
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0);  // before the runtime initialises
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    std::printf("{\"tool\": \"latency_ref\", \"error\": %s, \"results\": []}\n",
                json_str(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e)).c_str());
    return 1;
  }
  if (o.gpus.empty())
    for (int i = 0; i < n; ++i) o.gpus.push_back(i);
  for (int g : o.gpus)
    if (g < 0 || g >= n) usage("GPU index out of range");

  Out out;
  for (int i : o.gpus) {
    if (o.host) host_latency(i, o, out);
  }
  if (o.peer) {
    for (int i : o.gpus)
      for (int j : o.gpus)
        if (i != j) peer_latency(i, j, o, out);
  }
  if (o.peer_bw && o.gpus.size() > 1) {
    std::unique_ptr<Gate> gate;
    std::string gate_err;
    try {
      CK(cudaSetDevice(o.gpus[0]));
      gate = std::make_unique<Gate>();
    } catch (const std::exception &e) {
      gate_err = std::string("spin gate: ") + e.what();
    }
    for (int i : o.gpus)
      for (int j : o.gpus)
        if (i != j) peer_bandwidth(i, j, o, gate.get(), gate_err, out);
  }
  for (int i : o.gpus) {
    if (o.launch) launch_latency(i, o, out);
  }

  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  std::printf("{\"tool\": \"latency_ref\", \"cuda_runtime_version\": %d, \"cuda_driver_version\": %d", rt, drv);
  std::printf(", \"cuda_device_order\": %s", json_str(getenv("CUDA_DEVICE_ORDER") ? getenv("CUDA_DEVICE_ORDER") : "").c_str());
  if (o.node >= -1) std::printf(", \"host_numa_node\": %d", o.node);
  if (o.peer_bw)
    std::printf(", \"peer_bw\": {\"size_bytes\": %zu, \"batch\": %d, \"loaded_copies\": %d, \"samples\": %d, "
                "\"warmup\": %d, \"gate_timeout_seconds\": %.1f}",
                o.copy_size, o.batch, loaded_copies(o.batch), o.samples, o.warmup, kGateTimeoutNs * 1e-9);
  std::printf(", \"gpus\": [");
  for (size_t k = 0; k < o.gpus.size(); ++k) {
    cudaDeviceProp p{};
    std::string name = cudaGetDeviceProperties(&p, o.gpus[k]) == cudaSuccess ? p.name : "";
    std::printf("%s{\"gpu\": %d, \"pci_bus_id\": %s, \"name\": %s}", k ? ", " : "", o.gpus[k],
                json_str(bus_id(o.gpus[k])).c_str(), json_str(name).c_str());
  }
  std::printf("],\n \"results\": [\n  ");
  for (size_t k = 0; k < out.results.size(); ++k) std::printf("%s%s", k ? ",\n  " : "", out.results[k].c_str());
  std::printf("\n ]}\n");
  return 0;
}
