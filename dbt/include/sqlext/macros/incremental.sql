{#-- The incremental materialization of the sqlext adapter.

     A model whose SQL reads STREAM(...) sources runs as one sqlext incremental run: the
     changes that arrived in those tables since the last run go through the model's
     CHANGELOG_FILTER or FK_JOIN with the state the earlier runs kept, and the rows that
     come out are appended to the model's table (which also holds that state). The first run
     and a full refresh process the whole history. A model may read another such model
     (STREAM(ref(...))): it reads the change rows that model appended since its own last run;
     if that model was rebuilt (a full refresh) since then, the run is refused
     ([STREAM_SOURCE_REBUILT]) until this model is rebuilt too. A STREAM(name) may also read a
     folder of change files that the model's sqlext_sources config names (its path, format,
     schema, reader options and bad-records mode); records set aside in the quarantine are
     counted in the run's message.

     Any other model runs the spark adapter's incremental materialization, after one check: an
     incremental run (the table exists, no full refresh) whose SQL calls CHANGELOG_FILTER,
     FK_JOIN or a recursion without reading streams is refused with
     [INCREMENTAL_MODEL_UNSUPPORTED], because over the new rows alone these functions give
     wrong results without any error. --#}
{% materialization incremental, adapter='sqlext', supported_languages=['sql', 'python'] -%}
  {%- if model['language'] == 'sql' and adapter.sqlext_reads_streams(compiled_code) -%}
    {{ return(sqlext_streaming_incremental()) }}
  {%- endif -%}
  {%- if model['language'] == 'sql' and is_incremental() -%}
    {%- do adapter.sqlext_check_incremental_run(model['name'], compiled_code) -%}
  {%- endif -%}
  {{ return(materialization_incremental_spark()) }}
{%- endmaterialization %}


{% macro sqlext_streaming_incremental() %}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing = load_cached_relation(this) -%}
  {%- if existing is not none and not existing.is_table -%}
    {%- do adapter.drop_relation(existing) -%}
  {%- endif -%}
  {{ run_hooks(pre_hooks) }}
  {#-- the folders of change files STREAM(name) reads, and how: the model's sqlext_sources config --#}
  {%- set message = adapter.sqlext_run_stream(target_relation.render(), compiled_code, should_full_refresh(),
                                              config.get('sqlext_sources')) -%}
  {%- call noop_statement("main", message) -%}{{ compiled_code }}{%- endcall -%}
  {{ run_hooks(post_hooks) }}
  {%- do persist_docs(target_relation, model) -%}
  {{ return({'relations': [target_relation]}) }}
{% endmacro %}
