// server.h: the TCP side of the gdbstub: one listening socket and at most
// one client (`vbts run --gdb=[HOST:]PORT`, docs/gdb.md).  Non-blocking
// polls, so that the machine's run loop can check for a client or a Ctrl-C
// between two slices of guest execution.
#ifndef VBTS_GDB_SERVER_H_
#define VBTS_GDB_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vbts::gdb {

class Server {
 public:
  // "PORT" listens on 127.0.0.1 (never all interfaces unless asked: "0.0.0.0:PORT");
  // "HOST:PORT" on that IPv4 address or name.  Port 0 takes a free port (tests).
  static absl::StatusOr<std::unique_ptr<Server>> Listen(absl::string_view spec);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const { return port_; }
  const std::string& address() const { return address_; }  // "127.0.0.1:1234"

  // Waits up to `timeout_ms` (-1: no limit, 0: poll) for a client while none
  // is connected; true when one is.  A second client waits in the backlog
  // until the first has gone.
  bool Accept(int timeout_ms);
  bool connected() const { return client_ >= 0; }
  // What the client sent, waiting up to `timeout_ms` for something; empty
  // if nothing came.  End of stream or an error closes the connection
  // (connected() turns false).
  std::string Read(int timeout_ms);
  // Sends every byte (blocking); an error closes the connection.
  void Write(absl::string_view bytes);
  void CloseClient();

 private:
  Server() = default;
  int listen_ = -1;
  int client_ = -1;
  uint16_t port_ = 0;
  std::string address_;
};

}  // namespace vbts::gdb

#endif  // VBTS_GDB_SERVER_H_
