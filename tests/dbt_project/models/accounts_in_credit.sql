{{
  config(
    materialized='table'
  )
}}

-- the change feed of the accounts in credit
select *
from CHANGELOG_FILTER(
  input     => TABLE({{ ref('accounts_changes') }}),
  key       => 'id',
  predicate => 'balance >= 0')
