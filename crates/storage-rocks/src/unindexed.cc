// The one RocksDB call the C API does not offer: a put into a transaction's write batch
// past its read index and without a lock, for keys no other transaction can write and this
// one will not read back. It appends to the batch under the transaction's
// `WriteBatchWithIndex`, which is where `Transaction::DisableIndexing` sends writes
// (`PutUntracked` would still lock the key). Compiled against the headers of the exact RocksDB
// that librocksdb-sys builds (build.rs finds them), so the virtual calls below use that
// library's own vtable layout.
#include <cstdlib>
#include <cstring>

#include "rocksdb/utilities/transaction.h"
#include "rocksdb/utilities/write_batch_with_index.h"
#include "rocksdb/write_batch.h"

// The C API's handle structs, as rocksdb/db/c.cc defines them (the C++ object's pointer
// first, which is all this reads).
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
  rocksdb::WriteBatch* batch = txn->rep->GetWriteBatch()->GetWriteBatch();
  rocksdb::Status s = batch->Put(cf->rep, rocksdb::Slice(key, key_len),
                                 rocksdb::Slice(value, value_len));
  if (!s.ok()) {
    std::string message = s.ToString();
    char* copy = static_cast<char*>(std::malloc(message.size() + 1));
    if (copy != nullptr) {
      std::memcpy(copy, message.c_str(), message.size() + 1);
    }
    *errptr = copy;
  }
}
