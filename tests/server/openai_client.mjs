// Drives `sustain serve` with the official openai npm client: completions,
// chat, streaming, a 400 and a 401. Prints one JSON object of what it saw;
// test_server_npm.cc checks it. Usage: node openai_client.mjs BASE_URL API_KEY
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const extra = { ignore_eos: true };
const c = await client.completions.create({
  model: out.models[0], prompt: "Hello from npm", max_tokens: 8, temperature: 0, ...extra,
});
out.completion = {
  text: c.choices[0].text, finish_reason: c.choices[0].finish_reason,
  completion_tokens: c.usage.completion_tokens,
};

let text = "";
const cs = await client.completions.create({
  model: out.models[0], prompt: "Hello from npm", max_tokens: 8, temperature: 0, stream: true,
  ...extra,
});
for await (const chunk of cs) for (const ch of chunk.choices) text += ch.text;
out.completion_stream = { text };

const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi!" }];
const chat = await client.chat.completions.create({
  model: out.models[0], messages, max_tokens: 6, temperature: 0, ...extra,
});
out.chat = { text: chat.choices[0].message.content, finish_reason: chat.choices[0].finish_reason };

text = "";
let usage = null;
const stream = await client.chat.completions.create({
  model: out.models[0], messages, max_tokens: 6, temperature: 0, stream: true,
  stream_options: { include_usage: true }, ...extra,
});
for await (const chunk of stream) {
  for (const ch of chunk.choices) text += ch.delta?.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
out.chat_stream = { text, usage };

try {
  await client.completions.create({ model: out.models[0], prompt: "x", temperature: 5 });
  out.bad_request = { status: 200 };
} catch (e) {
  out.bad_request = { status: e.status, message: e.error?.message ?? String(e) };
}
try {
  const anon = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await anon.models.list();
  out.unauthorized = { status: 200 };
} catch (e) {
  out.unauthorized = { status: e.status };
}
console.log(JSON.stringify(out));
