// CpuAccelerator; its stats come from /proc.
#include <arc/accelerators/cpu_accelerator.h>

#include <unistd.h>
#include <fstream>
#include <thread>

namespace arc {
namespace {

// Fields of /proc/meminfo in kB.
std::map<std::string, double> meminfo() {
  std::map<std::string, double> out;
  std::ifstream file("/proc/meminfo");
  std::string key;
  double value = 0;
  std::string unit;
  while (file >> key >> value) {
    out[key.substr(0, key.size() - 1)] = value;
    std::getline(file, unit);
  }
  return out;
}

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

}  // namespace

int64_t CpuAccelerator::device_count() const {
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

std::vector<c10::Device> CpuAccelerator::select(const Devices& devices) const {
  ARC_CHECK(devices.indices.empty(),
            "accelerator 'cpu' takes devices as a process count, not indices; write devices: ", devices.indices.size());
  return std::vector<c10::Device>(static_cast<size_t>(count(devices)), c10::Device(c10::kCPU));
}

std::map<std::string, double> CpuAccelerator::device_stats(c10::Device) {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  stat >> cpu;
  uint64_t total = 0;
  uint64_t idle = 0;
  uint64_t jiffies = 0;
  // user nice system idle iowait irq softirq steal; idle and iowait are not busy.
  for (int field = 0; field < 8 && stat >> jiffies; ++field) {
    total += jiffies;
    if (field == 3 || field == 4) idle += jiffies;
  }
  const uint64_t busy = total - idle;
  const double cpu_percent =
      percent(static_cast<double>(busy - busy_before_), static_cast<double>(total - total_before_));
  busy_before_ = busy;
  total_before_ = total;

  auto memory = meminfo();
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  double resident = 0;
  statm >> pages >> resident;
  return {{"cpu_percent", cpu_percent},
          {"cpu_vm_percent", percent(memory["MemTotal"] - memory["MemAvailable"], memory["MemTotal"])},
          {"cpu_swap_percent", percent(memory["SwapTotal"] - memory["SwapFree"], memory["SwapTotal"])},
          {"cpu_rss_mb", resident * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20)}};
}

}  // namespace arc
