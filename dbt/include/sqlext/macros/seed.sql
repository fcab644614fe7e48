{#-- Seeds: the rows of a CSV file go to their table as one Spark DataFrame, not as INSERT
     statements with the values pasted into their text. So a value holding a quote or a
     backslash loads as written, and each column's type is worked out once, not once per
     cell (which made a large seed take hours). The table itself is created by the spark
     adapter, as usual. --#}
{% macro sqlext__load_csv_rows(model, agate_table) %}
  {%- set column_override = model['config'].get('column_types', {}) -%}
  {%- set types = [] -%}
  {%- for column_name in agate_table.column_names -%}
    {%- do types.append(column_override.get(column_name, adapter.convert_type(agate_table, loop.index0))) -%}
  {%- endfor -%}
  {{ return(adapter.sqlext_load_seed_rows(this.render(), agate_table, types)) }}
{% endmacro %}
