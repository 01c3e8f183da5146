#include "gdb/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace vbts::gdb {

absl::StatusOr<std::unique_ptr<Server>> Server::Listen(absl::string_view spec) {
  std::string host = "127.0.0.1";
  absl::string_view port_text = spec;
  if (size_t colon = spec.rfind(':'); colon != absl::string_view::npos) {
    host = std::string(spec.substr(0, colon));
    port_text = spec.substr(colon + 1);
    if (host.empty()) host = "127.0.0.1";
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535)
    return absl::InvalidArgumentError(absl::StrFormat("--gdb=%s: expected [HOST:]PORT with PORT 0-65535", spec));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); e != 0 || res == nullptr)
    return absl::InvalidArgumentError(
        absl::StrFormat("--gdb=%s: cannot resolve %s as an IPv4 address: %s", spec, host, gai_strerror(e)));
  sockaddr_in addr{};
  std::memcpy(&addr, res->ai_addr, sizeof(addr));
  ::freeaddrinfo(res);
  addr.sin_port = htons(static_cast<uint16_t>(port));

  std::unique_ptr<Server> s(new Server());
  s->listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_ < 0) return absl::InternalError(absl::StrFormat("socket: %s", std::strerror(errno)));
  int one = 1;
  ::setsockopt(s->listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s->listen_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return absl::UnavailableError(absl::StrFormat("--gdb=%s: cannot listen there: %s", spec, std::strerror(errno)));
  if (::listen(s->listen_, 1) != 0)
    return absl::UnavailableError(absl::StrFormat("--gdb=%s: listen: %s", spec, std::strerror(errno)));
  socklen_t len = sizeof(addr);
  ::getsockname(s->listen_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = ntohs(addr.sin_port);
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  s->address_ = absl::StrFormat("%s:%u", ip, s->port_);
  return s;
}

Server::~Server() {
  CloseClient();
  if (listen_ >= 0) ::close(listen_);
}

bool Server::Accept(int timeout_ms) {
  if (client_ >= 0) return true;
  pollfd p{listen_, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR && timeout_ms < 0);
  if (n <= 0) return false;
  client_ = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client_ < 0) return false;
  // Replies are small and a client waits for each: no Nagle delay.
  int one = 1;
  ::setsockopt(client_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return true;
}

std::string Server::Read(int timeout_ms) {
  if (client_ < 0) return {};
  pollfd p{client_, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);
  } while (n < 0 && errno == EINTR && timeout_ms < 0);
  if (n <= 0) return {};
  char buf[4096];
  ssize_t got = ::recv(client_, buf, sizeof(buf), MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return {};
  if (got <= 0) {  // end of stream or a reset: the client is gone
    CloseClient();
    return {};
  }
  return std::string(buf, static_cast<size_t>(got));
}

void Server::Write(absl::string_view bytes) {
  while (client_ >= 0 && !bytes.empty()) {
    ssize_t n = ::send(client_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      CloseClient();
      return;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void Server::CloseClient() {
  if (client_ >= 0) ::close(client_);
  client_ = -1;
}

}  // namespace vbts::gdb
