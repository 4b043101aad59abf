// pointload drives point operations against Nidus (the MongoDB Go driver) or PostgreSQL
// (pgx) from compiled clients of similar cost, so a comparison measures the servers rather
// than the Python drivers (pymongo spends about three times psycopg's client CPU on a point
// read). bench/scale.py runs it and measures the server's CPU around it.
//
//	pointload -system nidus|postgres -uri URI -op find_one|update_one|insert_one -n N
//	          -clients C -lo L -hi H [-seed S]
//
// find_one reads random ids in [lo, hi) and fails if one is missing; update_one increments
// `n` of random ids in [lo, hi) (bench.py's update row) and fails unless one matches; insert_one inserts
// bench.py's document shape with ids lo, lo+1, ... (n of them, spread over the clients).
// Prints one JSON line: {"ops": N, "seconds": S}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

var colors = []string{"red", "green", "blue", "cyan", "magenta"}

// document is bench.py's make_docs document with _id i, in its field order.
func document(i int64) bson.D {
	return bson.D{
		{Key: "_id", Value: i},
		{Key: "k", Value: i},
		{Key: "grp", Value: i % 100},
		{Key: "name", Value: fmt.Sprintf("user%07d", i)},
		{Key: "n", Value: int64(0)},
		{Key: "nested", Value: bson.D{
			{Key: "a", Value: i % 1000}, {Key: "b", Value: "xyz"}, {Key: "c", Value: i%2 == 0},
		}},
		{Key: "tags", Value: bson.A{colors[i%5], colors[(i+1)%5], colors[(i+2)%5]}},
	}
}

// documentJSON is the same document as PostgreSQL's jsonb input.
func documentJSON(i int64) []byte {
	b, _ := json.Marshal(map[string]any{
		"_id": i, "k": i, "grp": i % 100, "name": fmt.Sprintf("user%07d", i), "n": 0,
		"nested": map[string]any{"a": i % 1000, "b": "xyz", "c": i%2 == 0},
		"tags":   []string{colors[i%5], colors[(i+1)%5], colors[(i+2)%5]},
	})
	return b
}

// worker runs one client's share of the operations.
type worker func(ctx context.Context, client int, ids []int64) error

func nidusWorker(ctx context.Context, uri string, clients int, op string) (worker, func(), error) {
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetMaxPoolSize(uint64(clients)))
	if err != nil {
		return nil, nil, err
	}
	coll := c.Database("bench").Collection("docs")
	closer := func() { _ = c.Disconnect(ctx) }
	switch op {
	case "find_one":
		return func(ctx context.Context, _ int, ids []int64) error {
			for _, id := range ids {
				var doc bson.Raw
				if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
					return fmt.Errorf("nidus: _id %d: %w", id, err)
				}
			}
			return nil
		}, closer, nil
	case "update_one":
		inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
		return func(ctx context.Context, _ int, ids []int64) error {
			for _, id := range ids {
				res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, inc)
				if err != nil || res.MatchedCount != 1 {
					return fmt.Errorf("nidus: update of %d: %v", id, err)
				}
			}
			return nil
		}, closer, nil
	case "insert_one":
		return func(ctx context.Context, _ int, ids []int64) error {
			for _, id := range ids {
				if _, err := coll.InsertOne(ctx, document(id)); err != nil {
					return fmt.Errorf("nidus: insert %d: %w", id, err)
				}
			}
			return nil
		}, closer, nil
	}
	closer()
	return nil, nil, fmt.Errorf("unknown op %q", op)
}

func postgresWorker(ctx context.Context, uri string, clients int, op string) (worker, func(), error) {
	conns := make([]*pgx.Conn, clients)
	closer := func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close(ctx)
			}
		}
	}
	for i := range conns {
		c, err := pgx.Connect(ctx, uri)
		if err != nil {
			closer()
			return nil, nil, err
		}
		conns[i] = c
	}
	switch op {
	case "find_one":
		return func(ctx context.Context, client int, ids []int64) error {
			for _, id := range ids {
				var doc []byte
				err := conns[client].QueryRow(ctx, "SELECT doc FROM docs WHERE id = $1", id).Scan(&doc)
				if err != nil {
					return fmt.Errorf("postgres: id %d: %w", id, err)
				}
			}
			return nil
		}, closer, nil
	case "update_one":
		return func(ctx context.Context, client int, ids []int64) error {
			for _, id := range ids {
				tag, err := conns[client].Exec(ctx, "UPDATE docs SET doc = jsonb_set(doc, '{n}', "+
					"to_jsonb((doc->>'n')::bigint + 1)) WHERE id = $1", id)
				if err != nil || tag.RowsAffected() != 1 {
					return fmt.Errorf("postgres: update of %d: %v", id, err)
				}
			}
			return nil
		}, closer, nil
	case "insert_one":
		return func(ctx context.Context, client int, ids []int64) error {
			for _, id := range ids {
				_, err := conns[client].Exec(ctx, "INSERT INTO docs (id, doc) VALUES ($1, $2)",
					id, documentJSON(id))
				if err != nil {
					return fmt.Errorf("postgres: insert %d: %w", id, err)
				}
			}
			return nil
		}, closer, nil
	}
	closer()
	return nil, nil, fmt.Errorf("unknown op %q", op)
}

func main() {
	system := flag.String("system", "", "nidus or postgres")
	uri := flag.String("uri", "", "connection string")
	op := flag.String("op", "find_one", "find_one, update_one or insert_one")
	n := flag.Int("n", 5000, "operations in all")
	clients := flag.Int("clients", 1, "concurrent clients")
	lo := flag.Int64("lo", 0, "first id")
	hi := flag.Int64("hi", 0, "ids are below this (find_one)")
	seed := flag.Int64("seed", 21, "random seed of the ids read")
	flag.Parse()
	if *clients < 1 || *n < *clients {
		fail(fmt.Errorf("need 1 <= clients <= n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	var work worker
	var closer func()
	var err error
	switch *system {
	case "nidus":
		work, closer, err = nidusWorker(ctx, *uri, *clients, *op)
	case "postgres":
		work, closer, err = postgresWorker(ctx, *uri, *clients, *op)
	default:
		err = fmt.Errorf("unknown system %q", *system)
	}
	if err != nil {
		fail(err)
	}
	defer closer()

	// The ids of each client, chosen before the clock starts.
	per := *n / *clients
	rng := rand.New(rand.NewSource(*seed))
	shares := make([][]int64, *clients)
	next := *lo
	for c := range shares {
		shares[c] = make([]int64, per)
		for i := range shares[c] {
			if *op != "insert_one" {
				if *hi <= *lo {
					fail(fmt.Errorf("%s needs lo < hi", *op))
				}
				shares[c][i] = *lo + rng.Int63n(*hi-*lo)
			} else {
				shares[c][i] = next
				next++
			}
		}
	}
	// One operation per client first: connections are open before the clock starts.
	for c := range shares {
		if err := work(ctx, c, shares[c][:1]); err != nil {
			fail(err)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, *clients)
	start := time.Now()
	for c := range shares {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			if err := work(ctx, c, shares[c][1:]); err != nil {
				errs <- err
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	close(errs)
	if err := <-errs; err != nil {
		fail(err)
	}
	out, _ := json.Marshal(map[string]any{"ops": (per - 1) * *clients, "seconds": elapsed})
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pointload:", err)
	os.Exit(1)
}
