// ServedHBaseStore: an HBaseTableStore connected to its own HBaseTestServer
// on a free loopback port, as one TableStore (tests and benchmarks only).
//
// The server keeps its data under `dir`, so destroying the store and
// opening another on the same dir is a reopen. The client is destroyed
// before the server. Thread-safety: as HBaseTableStore.
#pragma once

#include <memory>
#include <string>

#include "store/hbase/hbase_store.h"
#include "tests/hbase/hbase_test_server.h"

namespace logdex {

class ServedHBaseStore final : public TableStore {
 public:
  // `client` supplies the client options; host and port are the server's,
  // and the server uses the client's transport and protocol.
  static Result<std::unique_ptr<ServedHBaseStore>> Open(const std::string& dir, const Clock* clock,
                                                        HBaseOptions client = DefaultClientOptions());
  // Test defaults: pool of 2, no backoff sleeps.
  static HBaseOptions DefaultClientOptions();

  Status CreateTable(std::string_view name, const TableOptions& options) override {
    return client_->CreateTable(name, options);
  }
  Status CreateTables(const std::vector<NamedTable>& tables) override { return client_->CreateTables(tables); }
  bool HasTable(std::string_view name) const override { return client_->HasTable(name); }
  Status Write(const WriteBatch& batch) override { return client_->Write(batch); }
  Result<std::optional<std::string>> Get(std::string_view table, std::string_view key) override {
    return client_->Get(table, key);
  }
  Result<std::vector<std::optional<std::string>>> MultiGet(std::string_view table,
                                                           const std::vector<std::string>& keys) override {
    return client_->MultiGet(table, keys);
  }
  bool batched_gets() const override { return client_->batched_gets(); }
  bool shared() const override { return client_->shared(); }
  Result<bool> CheckAndPut(std::string_view table, std::string_view key, const std::optional<std::string>& expected,
                           std::string_view value) override {
    return client_->CheckAndPut(table, key, expected, value);
  }
  bool conditional_writes() const override { return client_->conditional_writes(); }
  Status Flush() override { return client_->Flush(); }
  Status Scan(const ScanSpec& spec, const RowVisitor& visit) override { return client_->Scan(spec, visit); }
  Status FuzzyScan(const FuzzyScanSpec& spec, const RowVisitor& visit) override {
    return client_->FuzzyScan(spec, visit);
  }
  std::unique_ptr<RowIterator> NewIterator(const ScanSpec& spec) override { return client_->NewIterator(spec); }
  StoreCounters counters() const override { return client_->counters(); }

  HBaseTestServer& server() { return *server_; }
  HBaseTableStore& client() { return *client_; }

 private:
  ServedHBaseStore(std::unique_ptr<HBaseTestServer> server, std::unique_ptr<HBaseTableStore> client)
      : server_(std::move(server)), client_(std::move(client)) {}

  std::unique_ptr<HBaseTestServer> server_;
  std::unique_ptr<HBaseTableStore> client_;  // declared last: destroyed first
};

}  // namespace logdex
