-- trial_labels: one row per labelled trace, from the label files `otel-assay label`
-- writes into LAKE/labels/ (bound by the engine as lake_labels; see analyze/labels.py).
--
-- A label keys a trace by trace_id, or by gen_ai.conversation.id / session.id on any of
-- its spans (OpenInference and LangSmith call it a session), so traces recorded later in
-- the same conversation pick the label up too. A trial stays one trace: a key that several
-- traces carry (one run recorded as several traces) labels each of them, each a trial of
-- its own; `otel-assay label` counts the traces its keys match and names such keys.
-- Labels of one key merge column by column:
-- each value comes from the newest label file that gives it (NULL = not given), so a file
-- with only outcomes keeps the scenarios labelled before. A file holds one row per key
-- (analyze/labels.py refuses conflicting rows), so (time, file name) orders labels fully.
-- A trace matched by several keys takes each value from its trace_id label first, then its
-- conversation label, then its session label (column by column too: outcomes labelled by
-- trace id keep the scenario and version labelled by conversation). The conversation /
-- session lookups read span attributes, so they only run when such labels exist.
--
-- label_key_matches(key_kind, key, attributes): whether a span's attributes carry a
-- conversation or session label's key (also used by `otel-assay label` to count keys no
-- span carries yet). OpenInference and LangSmith call a session by their own key names.
CREATE OR REPLACE MACRO label_key_matches(key_kind, key, attributes) AS
    (key_kind = 'conversation_id' AND key = attributes['gen_ai.conversation.id'])
    OR (key_kind = 'session_id' AND key IN (attributes['session.id'], attributes['langsmith.trace.session_id'],
                                            attributes['traceloop.association.properties.session_id']));

CREATE OR REPLACE VIEW trial_labels AS
WITH ranked AS (
    SELECT *, row_number() OVER (PARTITION BY key_kind, key ORDER BY labelled_at_unix_nano, filename) AS age
    FROM lake_labels
),
latest AS (
    SELECT
        key_kind,
        key,
        arg_max(scenario, age) FILTER (WHERE scenario IS NOT NULL) AS scenario,
        arg_max(version, age) FILTER (WHERE version IS NOT NULL) AS version,
        arg_max(outcome, age) FILTER (WHERE outcome IS NOT NULL) AS outcome,
        arg_max(run_id, age) FILTER (WHERE run_id IS NOT NULL) AS run_id,
        arg_max(score, age) FILTER (WHERE score IS NOT NULL) AS score,
        max(labelled_at_unix_nano) AS labelled_at_unix_nano
    FROM ranked
    GROUP BY key_kind, key
),
by_attribute AS (
    SELECT DISTINCT s.trace_id, l.key_kind, l.key
    FROM spans s
    JOIN latest l ON label_key_matches(l.key_kind, l.key, s.attributes)
    WHERE EXISTS (SELECT 1 FROM latest WHERE key_kind <> 'trace_id')
),
matched AS (
    SELECT l.key AS trace_id, 1 AS preference, l.* EXCLUDE (key_kind, key) FROM latest l WHERE l.key_kind = 'trace_id'
    UNION ALL
    SELECT b.trace_id, CASE l.key_kind WHEN 'conversation_id' THEN 2 ELSE 3 END, l.* EXCLUDE (key_kind, key)
    FROM by_attribute b JOIN latest l USING (key_kind, key)
)
SELECT trace_id,
    arg_min(scenario, (preference, -labelled_at_unix_nano)) FILTER (WHERE scenario IS NOT NULL) AS scenario,
    arg_min(version, (preference, -labelled_at_unix_nano)) FILTER (WHERE version IS NOT NULL) AS version,
    arg_min(outcome, (preference, -labelled_at_unix_nano)) FILTER (WHERE outcome IS NOT NULL) AS outcome,
    arg_min(run_id, (preference, -labelled_at_unix_nano)) FILTER (WHERE run_id IS NOT NULL) AS run_id,
    arg_min(score, (preference, -labelled_at_unix_nano)) FILTER (WHERE score IS NOT NULL) AS score
FROM matched
GROUP BY trace_id;
