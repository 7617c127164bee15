// Sends a chat request with a data-URI image through the official openai
// npm client, streaming and not, and prints what it got as one JSON object
// (test_server_vision.cc checks it). Usage: node openai_vision.mjs BASE_URL PNG_FILE
import OpenAI from "openai";
import { readFileSync } from "node:fs";

const [baseURL, png] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 120000 });
const url = "data:image/png;base64," + readFileSync(png).toString("base64");
const messages = [{
  role: "user",
  content: [
    { type: "text", text: "Look at this picture:\n\n" },
    { type: "image_url", image_url: { url } },
    { type: "text", text: "\n\nWhat colour is it?" },
  ],
}];
const out = {};
const args = { model: "m", messages, max_tokens: 3, temperature: 0, ignore_eos: true };
const r = await client.chat.completions.create(args);
out.text = r.choices[0].message.content;
out.prompt_tokens = r.usage.prompt_tokens;
let text = "";
const s = await client.chat.completions.create({ ...args, stream: true });
for await (const chunk of s) for (const ch of chunk.choices) text += ch.delta?.content ?? "";
out.stream_text = text;
try {
  await client.chat.completions.create({
    ...args,
    messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://example.invalid/cat.png" } }] }],
  });
  out.remote = { status: 200 };
} catch (e) {
  out.remote = { status: e.status, message: e.error?.message ?? String(e) };
}
console.log(JSON.stringify(out));
