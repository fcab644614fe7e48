-- Orders as a Kafka-style upsert log (no _change_type; all-NULL values are a tombstone).
SELECT * FROM VALUES
  (100, 1,    25.0, 2L),
  (101, 2,    40.0, 2L),
  (102, 3,    -1.0, 2L),
  (101, 1,    40.0, 4L),
  (100, NULL, NULL, 6L)
AS t(order_id, customer_id, amount, _commit_version)
