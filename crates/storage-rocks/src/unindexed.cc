// The one RocksDB call the C API does not offer: a put into a transaction's write batch
// without its read index (`Transaction::DisableIndexing`) and without a lock
// (`PutUntracked`), for keys the transaction will not read back. Compiled against the
// headers of the exact RocksDB that librocksdb-sys builds (build.rs finds them), so the
// virtual calls below use that library's own vtable layout.
#include <cstdlib>
#include <cstring>

#include "rocksdb/utilities/transaction.h"

// The C API's handle structs, as rocksdb/db/c.cc defines them (a pointer to the C++ object
// first); `lib.rs` asserts the handle sizes it relies on.
struct rocksdb_transaction_t {
  rocksdb::Transaction* rep;
};
struct rocksdb_column_family_handle_t {
  rocksdb::ColumnFamilyHandle* rep;
  bool immortal;
};

extern "C" void nidus_transaction_put_unindexed(rocksdb_transaction_t* txn,
                                                rocksdb_column_family_handle_t* cf,
                                                const char* key, size_t key_len,
                                                const char* value, size_t value_len,
                                                char** errptr) {
  rocksdb::Transaction* t = txn->rep;
  t->DisableIndexing();
  rocksdb::Status s = t->PutUntracked(cf->rep, rocksdb::Slice(key, key_len),
                                      rocksdb::Slice(value, value_len));
  t->EnableIndexing();
  if (!s.ok()) {
    std::string message = s.ToString();
    char* copy = static_cast<char*>(std::malloc(message.size() + 1));
    if (copy != nullptr) {
      std::memcpy(copy, message.c_str(), message.size() + 1);
    }
    *errptr = copy;
  }
}
