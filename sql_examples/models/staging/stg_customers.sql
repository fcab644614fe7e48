{{ config(materialized='table') }}
-- Staging: the customers' change feed, minimal changes only.
SELECT *
FROM CHANGELOG_FILTER(
  input     => TABLE({{ ref('raw_customers_changes') }}),
  key       => 'id',
  predicate => 'name IS NOT NULL')
