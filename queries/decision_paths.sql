-- decision_paths: one row per trial, its decision path (as the AgentAssay paper defines
-- it, what the agent did in which order, the unit of path coverage): the ordered
-- sequence of (step kind, tool) pairs, written `kind[:tool] > kind[:tool] > ...` in seq
-- order ('' for a trial with no steps). Grouping trials by path gives the frequencies
-- Chao1 needs (f1 = paths seen once, f2 = seen twice).
--
-- A tool name is written with \ before each \, > and : in it, so that two different paths
-- never read the same: a tool named `a > tool:b` made one step read as the two steps
-- `tool:a > tool:b`, and the two paths counted as one. Ordinary names read as they are.
CREATE OR REPLACE VIEW decision_paths AS
SELECT t.trace_id, coalesce(p.path, '') AS path, coalesce(p.n_steps, 0) AS n_steps
FROM trials t
LEFT JOIN (
    SELECT trace_id,
        string_agg(step_kind || coalesce(':' || replace(replace(replace(tool_name, '\', '\\'), '>', '\>'), ':', '\:'), ''),
                   ' > ' ORDER BY seq) AS path,
        count(*) AS n_steps
    FROM steps GROUP BY trace_id
) p USING (trace_id);
