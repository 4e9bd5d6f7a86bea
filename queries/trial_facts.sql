-- trial_facts: one row per trial (the rows of `trials`), with what the trial's spans and
-- labels say about it, before any step is computed: the trial's identity (run_id,
-- scenario, version, trial_index), its outcome and score, and the span-level facts
-- `trials` classifies it by. `trials` adds the step counts. Selectors on version,
-- scenario, run and outcome are resolved here first (Engine.scope), so that only the
-- selected trials' spans go through `steps`: these columns are therefore computed from
-- one trial's spans and its labels alone, never from another trial.
--
-- The derivation (the columns of `trials` document it): the assay.* attributes, the
-- earliest span that has one winning; version falling back to the resource's
-- service.version; a label (trial_labels) overriding them; a boolean
-- assay.trial.outcome (stored as 'true' / 'false') reading as pass / fail. Traces made
-- only of the gate's own verdict spans or of set-up are no trials (see trials.sql).
CREATE OR REPLACE VIEW trial_facts AS
WITH span_aggregates AS (
    SELECT
        trace_id,
        min(start_time_unix_nano) AS start_time_unix_nano,
        max(start_time_unix_nano + duration_ns) AS end_time_unix_nano,
        count(*) AS n_spans,
        arg_min(scenario, start_time_unix_nano) FILTER (WHERE scenario IS NOT NULL) AS scenario,
        arg_min(version, start_time_unix_nano) FILTER (WHERE version IS NOT NULL) AS version,
        arg_min(run_id, start_time_unix_nano) FILTER (WHERE run_id IS NOT NULL) AS run_id,
        arg_min(trial_index, start_time_unix_nano) FILTER (WHERE trial_index IS NOT NULL) AS trial_index,
        arg_min(outcome, start_time_unix_nano) FILTER (WHERE outcome IS NOT NULL) AS outcome,
        arg_min(score, start_time_unix_nano) FILTER (WHERE score IS NOT NULL) AS score,
        arg_min(error_class, start_time_unix_nano) FILTER (WHERE error_class IS NOT NULL) AS error_class,
        -- an assay.* value of another type than the typed column's (version=2 or score=1 as
        -- integers, a trial index as a string) is kept in the attributes map, not in the
        -- typed column: the root span's map (the trial span has every assay.* key) is kept
        -- for the trials whose root lacks a typed value, and read in span_facts. One
        -- aggregate over the roots only, not a map lookup and an aggregate per key over
        -- every span
        arg_min(attributes, start_time_unix_nano) FILTER (
            WHERE parent_span_id IS NULL AND (scenario IS NULL OR version IS NULL OR run_id IS NULL
                OR trial_index IS NULL OR outcome IS NULL OR score IS NULL OR error_class IS NULL)) AS root_attributes,
        arg_min(resource_attributes['service.version'], start_time_unix_nano)
            FILTER (WHERE parent_span_id IS NULL) AS service_version,
        bool_or(parent_span_id IS NULL AND status_code = 2
                -- the message, not a stack trace appended to it (OpenInference and LangSmith
                -- append one; langgraph's own frames mention step_timeout)
                AND (error_type ILIKE '%timeout%'
                     OR split_part(status_message, 'Traceback (most recent call last)', 1) ILIKE '%timeout%')) AS root_timed_out,
        arg_min(start_time_unix_nano + duration_ns, start_time_unix_nano)
            FILTER (WHERE parent_span_id IS NULL) AS root_end_time_unix_nano,
        -- the gate's own verdicts written back into the lake (gate --emit-otel lake)
        bool_and(scope_name IS NOT DISTINCT FROM 'otel_assay.gate') AS gate_record,
        -- an agent built outside any trial: AutoGen records each construction as a trace of
        -- one create_agent span, set-up rather than a run (each was listed as an empty run).
        -- Likewise a prompt template formatted outside any run: LangSmith traces it alone.
        -- The CASE looks the map up only on LangSmith's spans
        -- spans whose operation name the step mapping does not know (span_kinds.sql): no
        -- steps, so such a trial may look empty only because otel-assay cannot read it
        count(*) FILTER (WHERE op IS NOT NULL AND NOT known_operation(op)) AS n_unknown_ops,
        bool_and(CASE WHEN scope_name = 'langsmith' THEN coalesce(attributes['langsmith.span.kind'] = 'prompt', false)
                      ELSE op IS NOT DISTINCT FROM 'create_agent' END) AS setup_record
    FROM spans
    -- spans without a trace id (a foreign file's) are no trial: grouped together they made
    -- one fake trial, without steps, that pass rates counted as an empty run of its scenario
    WHERE trace_id IS NOT NULL
    GROUP BY trace_id
),
span_facts AS (
    SELECT * EXCLUDE (root_attributes) REPLACE (
        coalesce(scenario, root_attributes['assay.scenario']) AS scenario,
        coalesce(version, root_attributes['assay.agent.version']) AS version,
        coalesce(run_id, root_attributes['assay.run.id']) AS run_id,
        coalesce(trial_index, TRY_CAST(root_attributes['assay.trial.index'] AS BIGINT)) AS trial_index,
        coalesce(outcome, root_attributes['assay.trial.outcome']) AS outcome,
        coalesce(score, TRY_CAST(root_attributes['assay.trial.score'] AS DOUBLE)) AS score,
        coalesce(error_class, root_attributes['assay.error.class']) AS error_class)
    FROM span_aggregates
),
labelled AS (
    SELECT
        f.trace_id,
        coalesce(l.run_id, f.run_id) AS run_id,
        coalesce(l.scenario, f.scenario) AS scenario,
        coalesce(l.version, f.version, f.service_version) AS version,
        f.trial_index,
        lower(coalesce(l.outcome, f.outcome)) AS given_outcome,
        coalesce(l.score, f.score) AS score,
        CASE replace(lower(trim(f.error_class)), '_', '-')
            WHEN 'infra' THEN 'infrastructure'
            WHEN 'prevalidation' THEN 'pre-validation'
            WHEN 'empty' THEN 'empty-run'
            ELSE replace(lower(trim(f.error_class)), '_', '-') END AS explicit_class,
        f.root_timed_out,
        f.root_end_time_unix_nano,
        f.start_time_unix_nano,
        f.end_time_unix_nano,
        f.n_spans,
        f.n_unknown_ops,
        l.trace_id IS NOT NULL AS labelled
    FROM span_facts f
    LEFT JOIN trial_labels l USING (trace_id)
    WHERE NOT f.gate_record AND NOT f.setup_record
)
SELECT * EXCLUDE (given_outcome),
    -- a boolean assay.trial.outcome is stored as 'true' / 'false'
    CASE given_outcome WHEN 'true' THEN 'pass' WHEN 'false' THEN 'fail' ELSE given_outcome END AS outcome
FROM labelled;
