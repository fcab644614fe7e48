{{ config(materialized='table') }}
-- Staging: the orders' change feed, orders with a positive amount only.
SELECT *
FROM CHANGELOG_FILTER(
  input     => TABLE({{ ref('raw_orders_changes') }}),
  key       => 'order_id',
  predicate => 'amount > {{ var("min_amount", 0) }}',
  emit      => 'changes')
