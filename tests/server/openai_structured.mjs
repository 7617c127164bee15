// Structured output and tool calls through the official openai npm client:
// response_format json_schema (plain and streamed) and a forced tool call
// (plain and streamed). Prints one JSON object of what the client returned;
// test_server_npm.cc validates it. Usage: node openai_structured.mjs BASE_URL API_KEY
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const model = (await client.models.list()).data[0].id;
const out = {};
const messages = [{ role: "user", content: "Describe a city as JSON." }];

const schema = {
  type: "object",
  properties: {
    city: { type: "string", minLength: 1, maxLength: 10 },
    population: { type: "integer", minimum: 0, maximum: 99999999 },
    tags: { type: "array", items: { enum: ["old", "big", "cold"] }, maxItems: 3 },
  },
  required: ["city", "population"],
  additionalProperties: false,
};
const response_format = { type: "json_schema", json_schema: { name: "city", strict: true, schema } };

const r = await client.chat.completions.create({
  model, messages, max_tokens: 300, temperature: 1, seed: 11, n: 2, response_format,
});
out.json_schema = r.choices.map((c) => ({ content: c.message.content, finish: c.finish_reason }));

let text = "";
const s = await client.chat.completions.create({
  model, messages, max_tokens: 300, temperature: 1, seed: 12, stream: true, response_format,
});
for await (const chunk of s) for (const ch of chunk.choices) text += ch.delta?.content ?? "";
out.json_schema_stream = text;

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", minLength: 1, maxLength: 10 },
                    unit: { enum: ["c", "f"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
}];
const tool_choice = { type: "function", function: { name: "get_weather" } };
const t = await client.chat.completions.create({
  model, messages, max_tokens: 200, temperature: 1, seed: 13, tools, tool_choice,
});
out.tool = { finish: t.choices[0].finish_reason, calls: t.choices[0].message.tool_calls };

const calls = {};
let finish = null;
const ts = await client.chat.completions.create({
  model, messages, max_tokens: 200, temperature: 1, seed: 14, tools, tool_choice: "required",
  stream: true,
});
for await (const chunk of ts) {
  for (const ch of chunk.choices) {
    for (const d of ch.delta?.tool_calls ?? []) {
      const c = (calls[d.index] ??= { name: "", arguments: "" });
      if (d.function?.name) c.name += d.function.name;
      if (d.function?.arguments) c.arguments += d.function.arguments;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
out.tool_stream = { finish, calls: Object.values(calls) };

// Parallel calls: "required" over two tools may return several; the same
// seed streamed (through the client's own accumulating stream helper) must
// give the same calls, arguments put together from their pieces.
const tools2 = [...tools, {
  type: "function",
  function: {
    name: "get_time",
    parameters: {
      type: "object",
      properties: { zone: { enum: ["utc", "cet"] } },
      required: ["zone"],
      additionalProperties: false,
    },
  },
}];
const simple = (cs) => (cs ?? []).map((c) => ({ id: c.id, name: c.function.name,
                                                arguments: c.function.arguments }));
out.parallel = [];
for (const seed of [21, 22, 23, 24]) {
  const req = { model, messages, max_tokens: 300, temperature: 1, seed, tools: tools2,
                tool_choice: "required" };
  const p = await client.chat.completions.create(req);
  const st = client.chat.completions.stream(req);
  let pieces = 0;
  st.on("chunk", (c) => { for (const ch of c.choices) pieces += ch.delta?.tool_calls?.length ?? 0; });
  const fin = await st.finalChatCompletion();
  out.parallel.push({
    finish: p.choices[0].finish_reason,
    calls: simple(p.choices[0].message.tool_calls),
    stream_finish: fin.choices[0].finish_reason,
    stream_calls: simple(fin.choices[0].message.tool_calls),
    stream_pieces: pieces,
  });
}
console.log(JSON.stringify(out));
