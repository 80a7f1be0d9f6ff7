// A loopback TCP port that is free at the moment of asking, for servers the tests start.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

namespace arc::testing {

/// A port in 25000..32767 that binds now: above the ports SLURM and LSF jobs derive from their ids,
/// below Linux's ephemeral ports (32768 and up), which the kernel hands any outgoing connection, so
/// that no connection takes it before the server that was given it binds.
inline int free_port() {
  std::mt19937 pick(std::random_device{}());
  std::uniform_int_distribution<int> ports(25000, 32767);
  for (;;) {
    const int port = ports(pick);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (free) return port;
  }
}

}  // namespace arc::testing
