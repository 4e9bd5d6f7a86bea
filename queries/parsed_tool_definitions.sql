-- parsed_tool_definitions: each distinct text of tool_definition_texts parsed once: one row
-- per (text, tool) with the tool's parameter JSON schema (canonical text, NULL if not
-- recorded). A text that is not a JSON array of definitions, and a definition without a
-- name, give no rows.
--
-- The set of tools offered in some trials is read from here, through the distinct texts of
-- those trials: every trial holds the same few texts, and expanding each trial into one row
-- per tool first (tool_definitions) cost most of the coverage sets' time on a large lake.
CREATE OR REPLACE VIEW parsed_tool_definitions AS
WITH parsed AS (
    SELECT defs, unnest(CAST(json_extract(defs, '$[*]') AS JSON[])) AS d
    FROM (SELECT DISTINCT defs FROM tool_definition_texts) WHERE json_valid(defs)
)
SELECT DISTINCT defs, tool_name, parameters
FROM (
    SELECT defs,
        coalesce(d->>'name', d->>'$.function.name') AS tool_name,
        canonical_json(CAST(coalesce(d->'parameters', d->'$.function.parameters', d->'input_schema') AS VARCHAR))
            AS parameters
    FROM parsed
)
WHERE tool_name IS NOT NULL;
