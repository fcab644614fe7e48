-- Customers' change feed (Delta change-data-feed shape), as a source model.
SELECT * FROM VALUES
  (1, 'Ada',   'London', 'insert',           1L),
  (2, 'Grace', 'NYC',    'insert',           1L),
  (1, 'Ada',   'London', 'update_preimage',  3L),
  (1, 'Ada',   'Paris',  'update_postimage', 3L),
  (2, 'Grace', 'NYC',    'delete',           5L)
AS t(id, name, city, _change_type, _commit_version)
