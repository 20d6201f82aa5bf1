#include "tests/hbase/served_store.h"

namespace logdex {

HBaseOptions ServedHBaseStore::DefaultClientOptions() {
  HBaseOptions o;
  o.pool_size = 2;
  o.retry_backoff_ms = 0;
  o.sleep = [](int) {};
  o.connect_timeout_ms = 2'000;
  o.rpc_timeout_ms = 30'000;
  o.pool_wait_ms = 30'000;
  return o;
}

Result<std::unique_ptr<ServedHBaseStore>> ServedHBaseStore::Open(const std::string& dir, const Clock* clock,
                                                                 HBaseOptions client) {
  HBaseTestServerOptions so;
  so.dir = dir;
  so.clock = clock;
  so.transport = client.transport;
  so.protocol = client.protocol;
  auto server = HBaseTestServer::Start(so);
  if (!server.ok()) return server.error();
  client.host = "127.0.0.1";
  client.port = (*server)->port();
  auto store = HBaseTableStore::Open(client);
  if (!store.ok()) return store.error();
  return std::unique_ptr<ServedHBaseStore>(new ServedHBaseStore(std::move(server.value()), std::move(store.value())));
}

}  // namespace logdex
