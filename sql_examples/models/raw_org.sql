SELECT * FROM VALUES
  (1, CAST(NULL AS INT), 'ceo'),
  (2, 1, 'cto'),
  (3, 1, 'cfo'),
  (4, 2, 'engineer')
AS t(id, manager_id, title)
