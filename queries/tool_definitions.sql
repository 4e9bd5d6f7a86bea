-- tool_definitions: the tools an LLM was offered, one row per (trial, tool name), with the
-- tool's parameter JSON schema (canonical text, NULL if not recorded). These are the
-- "tools available" of tool coverage and the schemas of boundary coverage. The recorded
-- texts and their sources: tool_definition_texts; each parsed once: parsed_tool_definitions.
CREATE OR REPLACE VIEW tool_definitions AS
SELECT DISTINCT r.trace_id, t.tool_name, t.parameters
FROM tool_definition_texts r
JOIN parsed_tool_definitions t USING (defs);
