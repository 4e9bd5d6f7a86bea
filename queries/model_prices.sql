-- model_prices: list prices in USD per million tokens, used by `steps` to cost LLM calls
-- that carry no cost attribute of their own.
--
-- Why a table and not a constant: OTel GenAI has no cost attribute, so cost must be
-- computed, and prices change. Users override this whole table with a CSV of the same
-- columns (`--prices FILE` or OTEL_ASSAY_PRICES; the engine then replaces this view).
--
-- Matching (see steps.sql): a step's model (response model first, then request model,
-- lower-cased) matches a row whose `model` equals it, or whose `model` followed by '-'
-- is a prefix of it (dated snapshots such as gpt-4o-2024-08-06); the longest match wins.
-- A row with a `provider` applies only to steps of that provider (gen_ai.provider.name);
-- the shipped rows leave it NULL because one model is served under several provider
-- names (openai, azure.ai.openai, ...); `vendor` is for people. A model with
-- no row gets a NULL cost, never 0.
--
-- Prices: the vendors' published list prices for standard (non-batch, non-cached) input
-- and output tokens, checked 2025. Verify before relying on them for billing.
CREATE OR REPLACE VIEW model_prices AS
SELECT CAST(provider AS VARCHAR) AS provider, model,
       CAST(input_usd_per_mtok AS DOUBLE) AS input_usd_per_mtok,
       CAST(output_usd_per_mtok AS DOUBLE) AS output_usd_per_mtok, vendor
FROM (VALUES
    (NULL, 'gpt-4o',             2.50,  10.00, 'OpenAI'),
    (NULL, 'gpt-4o-mini',        0.15,   0.60, 'OpenAI'),
    (NULL, 'gpt-4.1',            2.00,   8.00, 'OpenAI'),
    (NULL, 'gpt-4.1-mini',       0.40,   1.60, 'OpenAI'),
    (NULL, 'gpt-4.1-nano',       0.10,   0.40, 'OpenAI'),
    (NULL, 'gpt-4-turbo',       10.00,  30.00, 'OpenAI'),
    (NULL, 'gpt-3.5-turbo',      0.50,   1.50, 'OpenAI'),
    (NULL, 'o1',                15.00,  60.00, 'OpenAI'),
    (NULL, 'o3-mini',            1.10,   4.40, 'OpenAI'),
    (NULL, 'o4-mini',            1.10,   4.40, 'OpenAI'),
    (NULL, 'claude-3-5-sonnet',  3.00,  15.00, 'Anthropic'),
    (NULL, 'claude-3-7-sonnet',  3.00,  15.00, 'Anthropic'),
    (NULL, 'claude-sonnet-4',    3.00,  15.00, 'Anthropic'),
    (NULL, 'claude-3-5-haiku',   0.80,   4.00, 'Anthropic'),
    (NULL, 'claude-3-haiku',     0.25,   1.25, 'Anthropic'),
    (NULL, 'claude-3-opus',     15.00,  75.00, 'Anthropic'),
    (NULL, 'claude-opus-4',     15.00,  75.00, 'Anthropic'),
    (NULL, 'gemini-2.0-flash',   0.10,   0.40, 'Google'),
    (NULL, 'gemini-1.5-flash',   0.075,  0.30, 'Google'),
    (NULL, 'gemini-1.5-pro',     1.25,   5.00, 'Google')
) AS t(provider, model, input_usd_per_mtok, output_usd_per_mtok, vendor);

-- model_price(priced_model, provider): the prices of the row that matches a model
-- (lower-cased, response model first) by the rule above, as a struct; NULL fields when
-- no row matches. Shared by steps.sql and stored_steps.sql, so both price alike.
CREATE OR REPLACE MACRO model_price(priced_model, provider_name) AS (
    SELECT {'input_usd_per_mtok': arg_max(p.input_usd_per_mtok, (p.provider IS NOT NULL, length(p.model))),
            'output_usd_per_mtok': arg_max(p.output_usd_per_mtok, (p.provider IS NOT NULL, length(p.model)))}
    FROM model_prices p
    WHERE (priced_model = lower(p.model) OR starts_with(priced_model, lower(p.model) || '-'))
      AND (p.provider IS NULL OR lower(p.provider) = provider_name)
);
