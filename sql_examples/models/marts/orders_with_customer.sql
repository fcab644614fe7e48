{{ config(materialized='table') }}
-- The orders joined to their customer, kept up to date as both change (final table).
SELECT order_id, customer_id, amount, name, city
FROM FK_JOIN(
  left        => TABLE({{ ref('stg_orders') }}),
  right       => TABLE({{ ref('stg_customers') }}),
  left_key    => 'order_id',
  foreign_key => 'customer_id',
  right_key   => 'id',
  join_type   => 'left',
  emit        => 'final')
