// A block cache handle whose inserts are all high priority, over the same cache as the one
// it wraps: the indexes' column family reads through it, the records' through the plain
// one. RocksDB's LRU cache inserts data blocks at low priority and keeps high-priority
// entries (and blocks hit since they came in) in a pool of its own ahead of them (the engine
// lets it take 90% of the cache, see `nidus_cache_new_lru`), so index blocks, read by every
// point read and every index scan, are evicted after the record blocks around them: with
// data several times the cache, an `_id` read still finds its index entry cached and reads
// one block, the record's. The pool is a bound, not a reservation: records use whatever the
// indexes leave. No RocksDB option sets a column family's data blocks' priority, hence the
// wrapper (compiled against the headers of the exact RocksDB that librocksdb-sys builds, see
// build.rs).
#include <memory>

#include "rocksdb/advanced_cache.h"
#include "rocksdb/cache.h"

// The C API's cache handle, as rocksdb/db/c.cc defines it.
struct rocksdb_cache_t {
  std::shared_ptr<rocksdb::Cache> rep;
};

namespace {

class HighPriorityCache : public rocksdb::CacheWrapper {
 public:
  using rocksdb::CacheWrapper::CacheWrapper;

  const char* Name() const override { return "NidusHighPriorityCache"; }

  rocksdb::Status Insert(const rocksdb::Slice& key, ObjectPtr value,
                         const CacheItemHelper* helper, size_t charge,
                         Handle** handle, Priority /*priority*/,
                         const rocksdb::Slice& compressed_value,
                         rocksdb::CompressionType type) override {
    return target_->Insert(key, value, helper, charge, handle, Priority::HIGH,
                           compressed_value, type);
  }
};

}  // namespace

// Makes `handle` the high-priority view of `shared`'s cache (what `handle` held before is
// released).
extern "C" void nidus_cache_share_high_priority(rocksdb_cache_t* handle,
                                                const rocksdb_cache_t* shared) {
  handle->rep = std::make_shared<HighPriorityCache>(shared->rep);
}

// Makes `handle` a new LRU cache of `capacity` bytes in 2^`num_shard_bits` shards (-1:
// RocksDB's default for the capacity) whose high-priority pool may take
// `high_pri_pool_ratio` of it.
extern "C" void nidus_cache_new_lru(rocksdb_cache_t* handle, size_t capacity,
                                    int num_shard_bits,
                                    double high_pri_pool_ratio) {
  rocksdb::LRUCacheOptions opts;
  opts.capacity = capacity;
  opts.num_shard_bits = num_shard_bits;
  opts.high_pri_pool_ratio = high_pri_pool_ratio;
  handle->rep = opts.MakeSharedCache();
}
