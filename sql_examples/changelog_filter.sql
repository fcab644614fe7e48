-- CHANGELOG_FILTER: the change feed of "accounts in credit" (balance >= 0), derived from the
-- change feed of all accounts, forwarding only the changes the filtered table really sees.
--
--   sqlext run sql_examples/changelog_filter.sql

-- Account balances over five commits, in Delta's change-data-feed shape.
CREATE OR REPLACE TEMP VIEW accounts_changes AS
SELECT * FROM VALUES
  -- commit 1: three accounts open
  (1, 'alice', 120, 'insert',           1L),
  (2, 'bob',   -40, 'insert',           1L),
  (3, 'carol',  15, 'insert',           1L),
  -- commit 2: alice spends, still in credit; bob pays off his debt
  (1, 'alice', 120, 'update_preimage',  2L),
  (1, 'alice',  80, 'update_postimage', 2L),
  (2, 'bob',   -40, 'update_preimage',  2L),
  (2, 'bob',    10, 'update_postimage', 2L),
  -- commit 3: carol overdraws; dave opens overdrawn
  (3, 'carol',  15, 'update_preimage',  3L),
  (3, 'carol', -25, 'update_postimage', 3L),
  (4, 'dave',   -5, 'insert',           3L),
  -- commit 4: carol's account closes while overdrawn; alice's statement is re-sent unchanged
  (3, 'carol', -25, 'delete',           4L),
  (1, 'alice',  80, 'update_preimage',  4L),
  (1, 'alice',  80, 'update_postimage', 4L),
  -- commit 5: bob closes his account
  (2, 'bob',    10, 'delete',           5L)
AS accounts_changes(id, owner, balance, _change_type, _commit_version);

-- The minimal change feed of the filtered table ("send old values"): no row for carol's
-- close (she had already left the filtered table) or for alice's unchanged statement.
SELECT *
FROM CHANGELOG_FILTER(
  input     => TABLE(accounts_changes),
  key       => 'id',
  predicate => 'balance >= 0',
  emit      => 'changes')
ORDER BY _commit_version, id, _change_type DESC;

-- The record stream a Kafka Streams filter forwards without old values: one record per
-- change, a tombstone wherever the new row fails the predicate or is deleted.
SELECT *
FROM CHANGELOG_FILTER(
  input     => TABLE(accounts_changes),
  key       => 'id',
  predicate => 'balance >= 0',
  emit      => 'records')
ORDER BY _commit_version, id;

-- The filtered table after the last commit.
SELECT *
FROM CHANGELOG_FILTER(
  input     => TABLE(accounts_changes),
  key       => 'id',
  predicate => 'balance >= 0',
  emit      => 'final')
ORDER BY id;
