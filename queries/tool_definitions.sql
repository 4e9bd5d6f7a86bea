-- tool_definitions: the tools an LLM was offered, one row per (trial, tool name), with the
-- tool's parameter JSON schema (canonical text, NULL if not recorded). These are the
-- "tools available" of tool coverage and the schemas of boundary coverage.
--
-- Sources: gen_ai.tool.definitions (a JSON array; semconv shape {"name", "parameters"},
-- OpenAI shape {"function": {"name", "parameters"}}, Anthropic shape {"name",
-- "input_schema"}) and OpenInference's flattened llm.tools.<i>.tool.json_schema keys.
-- Each distinct definition string is parsed once.
CREATE OR REPLACE VIEW tool_definitions AS
WITH raw AS (
    SELECT DISTINCT trace_id, attributes['gen_ai.tool.definitions'] AS defs
    FROM spans
    WHERE attributes['gen_ai.tool.definitions'] IS NOT NULL
    UNION
    SELECT DISTINCT trace_id, '[' || array_to_string(list_sort(list_transform(
        list_filter(map_entries(attributes), lambda e: e.key LIKE 'llm.tools.%.tool.json_schema'),
        lambda e: e.value)), ',') || ']'
    FROM spans
    WHERE attributes['openinference.span.kind'] = 'LLM' AND attributes['llm.tools.0.tool.json_schema'] IS NOT NULL
),
parsed AS (
    SELECT defs, unnest(CAST(json_extract(defs, '$[*]') AS JSON[])) AS d
    FROM (SELECT DISTINCT defs FROM raw) WHERE json_valid(defs)
),
tools AS (
    SELECT DISTINCT defs,
        coalesce(d->>'name', d->>'$.function.name') AS tool_name,
        canonical_json(CAST(coalesce(d->'parameters', d->'$.function.parameters', d->'input_schema') AS VARCHAR))
            AS parameters
    FROM parsed
)
SELECT DISTINCT r.trace_id, t.tool_name, t.parameters
FROM raw r JOIN tools t USING (defs)
WHERE t.tool_name IS NOT NULL;
