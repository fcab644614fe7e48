{{ config(materialized='view') }}

select * from values
  (1, 'alice', 120, 'insert',           1L),
  (2, 'bob',   -40, 'insert',           1L),
  (1, 'alice', 120, 'update_preimage',  2L),
  (1, 'alice', -10, 'update_postimage', 2L),
  (2, 'bob',   -40, 'update_preimage',  3L),
  (2, 'bob',    30, 'update_postimage', 3L)
as t(id, owner, balance, _change_type, _commit_version)
