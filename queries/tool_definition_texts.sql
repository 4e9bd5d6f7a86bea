-- tool_definition_texts: the tool definitions an LLM was offered, as recorded: one row per
-- span that records them, with its trial and the text (a trial's calls mostly repeat one
-- text: a question about some trials reads their distinct texts, which costs less than
-- making each trial's distinct first). parsed_tool_definitions parses each distinct text
-- once, and tool_definitions joins the two.
--
-- Sources: gen_ai.tool.definitions (a JSON array; semconv shape {"name", "parameters"},
-- OpenAI shape {"function": {"name", "parameters"}}, Anthropic shape {"name",
-- "input_schema"}) and OpenInference's flattened llm.tools.<i>.tool.json_schema keys, put
-- back together as one JSON array.
CREATE OR REPLACE VIEW tool_definition_texts AS
SELECT trace_id, attributes['gen_ai.tool.definitions'] AS defs
FROM spans
WHERE attributes['gen_ai.tool.definitions'] IS NOT NULL
UNION ALL
SELECT trace_id, '[' || array_to_string(list_sort(list_transform(
    list_filter(map_entries(attributes), lambda e: e.key LIKE 'llm.tools.%.tool.json_schema'),
    lambda e: e.value)), ',') || ']'
FROM spans
WHERE attributes['openinference.span.kind'] = 'LLM' AND attributes['llm.tools.0.tool.json_schema'] IS NOT NULL;
