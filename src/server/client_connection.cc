#include "server/client_connection.h"

#include <dirent.h>
#include <linux/tcp.h>  // tcp_info with tcpi_bytes_sent (glibc's netinet/tcp.h lags)
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <string>

namespace kvtier::server {
namespace {

int port_of(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

// An address as httplib prints it (numeric host, as getnameinfo gives it) and its port.
bool address_is(const sockaddr_storage& addr, socklen_t len, std::string_view host, int port) {
  char text[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  return port_of(addr) == port && host == text;
}

// Calls `fn` with each descriptor the process has open until it returns false.
template <typename Fn>
void for_each_descriptor(Fn fn) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (!fn(int(fd))) break;
  }
  closedir(dir);
}

bool connects(int fd, std::string_view local_addr, int local_port, std::string_view remote_addr, int remote_port) {
  sockaddr_storage local{}, remote{};
  socklen_t local_len = sizeof local, remote_len = sizeof remote;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;  // not a socket
  if (local.ss_family != AF_INET && local.ss_family != AF_INET6) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) return false;  // not connected
  return address_is(local, local_len, local_addr, local_port) && address_is(remote, remote_len, remote_addr, remote_port);
}

}  // namespace

std::optional<ClientConnection> ClientConnection::find(std::string_view local_addr, int local_port,
                                                       std::string_view remote_addr, int remote_port) {
  thread_local int last_found = -1;
  if (last_found >= 0 && connects(last_found, local_addr, local_port, remote_addr, remote_port))
    return ClientConnection(last_found);
  std::optional<ClientConnection> found;
  for_each_descriptor([&](int fd) {
    if (!connects(fd, local_addr, local_port, remote_addr, remote_port)) return true;
    found = ClientConnection(fd);
    last_found = fd;
    return false;
  });
  return found;
}

size_t shut_connections_on(uint16_t port) {
  size_t shut = 0;
  for_each_descriptor([&](int fd) {
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof local, remote_len = sizeof remote;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 || port_of(local) != port ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0)
      return true;  // not a socket, another port, or a listening one
    if (shutdown(fd, SHUT_RDWR) == 0) ++shut;
    return true;
  });
  return shut;
}

bool ClientConnection::closed() const {
  // POLLHUP: both directions are shut (a reset, or our side too); POLLERR: a
  // pending error (ECONNRESET). POLLRDHUP alone is a half-close: still answered.
  pollfd watched{fd_, POLLIN, 0};
  if (poll(&watched, 1, 0) <= 0) return false;
  if ((watched.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
  if ((watched.revents & POLLIN) == 0) return false;
  // Readable: more bytes (a pipelined request), the end of the stream (a
  // half-close: not gone), or an error.
  char byte;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace kvtier::server

namespace kvtier::server {

bool ClientConnection::half_closed() const {
  pollfd watched{fd_, POLLIN, 0};
  if (poll(&watched, 1, 0) <= 0 || (watched.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return false;
  char byte;
  return (watched.revents & POLLIN) != 0 && recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool WaitingClient::left() {
  if (!connection_) return false;
  if (connection_->closed()) return true;
  if (!may_probe_ || !connection_->half_closed()) return false;
  may_probe_ = false;
  return !connection_->send_all("HTTP/1.1 100 Continue\r\n\r\n");
}

std::optional<uint64_t> ClientConnection::bytes_sent() const {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_sent) + sizeof info.tcpi_bytes_sent)
    return std::nullopt;
  return info.tcpi_bytes_sent;
}

void ClientConnection::linger_and_shut(int linger_ms, size_t linger_bytes) const {
  ::shutdown(fd_, SHUT_WR);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(linger_ms);
  char sink[16384];
  for (size_t dropped = 0; dropped < linger_bytes;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd in{fd_, POLLIN, 0};
    if (left.count() <= 0 || poll(&in, 1, int(left.count())) <= 0) break;
    const ssize_t n = recv(fd_, sink, sizeof sink, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) break;  // the client closed (or reset)
    dropped += size_t(n);
  }
  ::shutdown(fd_, SHUT_RD);
}

bool ClientConnection::send_all(std::string_view bytes) const {
  while (!bytes.empty()) {
    pollfd room{fd_, POLLOUT, 0};
    if (poll(&room, 1, 30000) <= 0 || (room.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return false;
    const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

}  // namespace kvtier::server
