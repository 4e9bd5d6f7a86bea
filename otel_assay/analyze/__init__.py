"""The analysis core: DuckDB views over a span lake (queries/*.sql) and what binds them.

Views, in creation order (each file in queries/ documents its columns and rules):

- ``spans``, ``span_events``, ``span_links``: the lake tables;
- ``model_prices``: the price table (shipped; replaced by ``--prices`` / OTEL_ASSAY_PRICES);
- ``span_kinds``: every span mapped onto the canonical step fields, all dialects;
- ``stored_steps``: the steps that step files hold (:mod:`.stepfiles`), read instead of
  computed for the trials wholly inside one stored span file;
- ``steps``: one row per agent step (dedupe, nearest-step parentage, depth, seq, respond,
  cost);
- ``trial_labels``, ``trials``, ``pass_rates``: one row per trial; error classes,
  per-protocol and intent-to-treat pass rates;
- ``fingerprint_tools``, ``fingerprints``: the behavioural fingerprint (the AgentAssay
  paper's: how a trial worked, not only whether it passed);
- ``decision_paths``, ``step_states``, ``abstract_states``, ``tool_definition_texts``,
  ``parsed_tool_definitions``, ``tool_definitions``, ``tool_arguments``, ``models_used``: the
  coverage sets;
- ``stability``, ``stability_summary``: the stability sub-scores and their roll-up.

Python modules: :mod:`.engine` (binding, ``materialize``), :mod:`.canonical` (canonical
JSON for tool arguments, a DuckDB function), :mod:`.labels`, :mod:`.select` (trial
selectors), :mod:`.fingerprint` (the matrix over a tool vocabulary), :mod:`.coverage`
(sets, schema boundaries, the report via :mod:`otel_assay.stats.coverage`), :mod:`.tables`
and :mod:`.sql` (what the analysis and ``sql`` commands print), :mod:`.stepfiles` and
:mod:`.stepwrite` (each lake file's steps, stored by ``compact``).
"""
