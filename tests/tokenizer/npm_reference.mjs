// Prints the ids that transformers.js (the @lenml/tokenizers port) gives
// for each string of a JSON array, as one JSON array of id arrays.
//   node npm_reference.mjs tokenizer-llama3|tokenizer-qwen3 corpus.json
// Special-token text is matched (transformers.js always splits added
// tokens) and no BOS/EOS is added.
import { readFileSync } from "node:fs";

const [pkg, corpusPath] = process.argv.slice(2);
if (!pkg || !corpusPath) {
  console.error("usage: node npm_reference.mjs <package> <corpus.json>");
  process.exit(2);
}
const { fromPreTrained } = await import(`@lenml/${pkg}`);
const tokenizer = fromPreTrained();
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const ids = corpus.map((text) => Array.from(tokenizer.encode(text, { add_special_tokens: false })));
process.stdout.write(JSON.stringify(ids) + "\n");
