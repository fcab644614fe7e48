-- A view over a table model.
SELECT name, COUNT(*) AS orders
FROM {{ ref('orders_with_customer') }}
GROUP BY name
