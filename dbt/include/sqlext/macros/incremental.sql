{#-- The incremental materialization of the spark adapter, after one check: an incremental
     run (the table exists, no full refresh) of a model whose SQL calls CHANGELOG_FILTER,
     FK_JOIN or a recursion is refused with [INCREMENTAL_MODEL_UNSUPPORTED], because over
     the new rows alone these functions give wrong results without any error. The first
     build and a full refresh run as in the spark adapter. --#}
{% materialization incremental, adapter='sqlext', supported_languages=['sql', 'python'] -%}
  {%- if model['language'] == 'sql' and is_incremental() -%}
    {%- do adapter.sqlext_check_incremental_run(model['name'], compiled_code) -%}
  {%- endif -%}
  {{ return(materialization_incremental_spark()) }}
{%- endmaterialization %}
