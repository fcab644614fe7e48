-- CHANGELOG_FILTER over an Iceberg table's changes: "accounts in credit" as a change feed.
--
--   sqlext run sql_examples/iceberg.sql
--
-- format => 'iceberg' reads the rows of Iceberg's changelog view (the create_changelog_view
-- procedure): the table's columns, _change_type in upper case, _change_ordinal (the order of
-- the snapshots, the default ordering column) and _commit_snapshot_id (an id, left out).

CREATE OR REPLACE TEMP VIEW accounts_changelog AS
SELECT * FROM VALUES
  (1, 'alice', 120, 'INSERT',         0, 4921847L),
  (2, 'bob',   -40, 'INSERT',         0, 4921847L),
  (1, 'alice', 120, 'UPDATE_BEFORE',  1, 1130562L),
  (1, 'alice', -10, 'UPDATE_AFTER',   1, 1130562L),
  (2, 'bob',   -40, 'UPDATE_BEFORE',  1, 1130562L),
  (2, 'bob',    25, 'UPDATE_AFTER',   1, 1130562L),
  (2, 'bob',    25, 'DELETE',         2, 8802113L)
AS accounts_changelog(id, owner, balance, _change_type, _change_ordinal, _commit_snapshot_id);

-- Alice leaves the filtered table when she overdraws; Bob enters it when he pays off his
-- debt, and leaves it when his account closes.
SELECT *
FROM CHANGELOG_FILTER(
  input     => TABLE(accounts_changelog),
  key       => 'id',
  predicate => 'balance >= 0',
  format    => 'iceberg')
ORDER BY _change_ordinal, id, _change_type DESC;
