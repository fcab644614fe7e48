{{ config(materialized='table') }}
-- A recursive model: everyone's level below the CEO.
WITH RECURSIVE chain(id, title, level) AS (
  SELECT id, title, 0 FROM {{ ref('raw_org') }} WHERE manager_id IS NULL
  UNION ALL
  SELECT o.id, o.title, c.level + 1
  FROM {{ ref('raw_org') }} o JOIN chain c ON o.manager_id = c.id
)
SELECT * FROM chain
