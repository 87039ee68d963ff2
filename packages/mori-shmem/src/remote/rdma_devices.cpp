// SPDX-License-Identifier: MIT
#include "remote/rdma_devices.hpp"

#include <dirent.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>

namespace mori::shmem::remote {

namespace {

std::vector<std::string> entries(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') names.emplace_back(entry->d_name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());  // readdir's order is arbitrary
  return names;
}

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

// "mlx5_1:2" names one port; "mlx5_1" every port of the device.
bool names_port(const std::string& name, const std::string& device, const std::string& port) {
  return name == device || name == device + ":" + port;
}

}  // namespace

RdmaPortSelection select_rdma_ports(const std::string& setting, const std::string& sysfs_root) {
  std::vector<std::pair<std::string, std::string>> all;  // (device, port)
  for (const std::string& device : entries(sysfs_root)) {
    for (const std::string& port : entries(sysfs_root + "/" + device + "/ports")) all.emplace_back(device, port);
  }
  std::string list = setting;
  const bool exclude = !list.empty() && list[0] == '^';
  if (exclude) list.erase(0, 1);
  std::vector<std::string> names;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    item = trimmed(item);
    if (!item.empty()) names.push_back(item);
  }

  RdmaPortSelection selection;
  std::set<std::string> matched;
  const auto port_name = [](const std::pair<std::string, std::string>& p) { return p.first + ":" + p.second; };
  if (names.empty() || exclude) {
    for (const auto& port : all) {
      bool listed = false;
      for (const std::string& name : names) {
        if (names_port(name, port.first, port.second)) {
          listed = true;
          matched.insert(name);
        }
      }
      if (!listed) selection.ports.push_back(port_name(port));
    }
  } else {
    for (const std::string& name : names) {  // in the setting's order, as MORI keeps it
      for (const auto& port : all) {
        const std::string full = port_name(port);
        if (!names_port(name, port.first, port.second)) continue;
        matched.insert(name);
        if (std::find(selection.ports.begin(), selection.ports.end(), full) == selection.ports.end()) {
          selection.ports.push_back(full);
        }
      }
    }
  }
  for (const std::string& name : names) {
    if (matched.count(name) == 0) selection.unknown.push_back(name);
  }
  return selection;
}

}  // namespace mori::shmem::remote
