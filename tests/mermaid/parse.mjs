// Parse Mermaid diagrams with mermaid's own parser (the one GitHub's renderer runs).
// stdin: a JSON array of diagram texts (without the ```mermaid fence).
// stdout: a JSON array of {ok, type, error}, one per diagram, in order.
// mermaid's parse path sanitises labels with DOMPurify, which needs a DOM: jsdom gives it
// one, headless, before mermaid is imported.
import { JSDOM } from 'jsdom';

const { window } = new JSDOM('');
globalThis.window = window;
globalThis.document = window.document;
const mermaid = (await import('mermaid')).default;
mermaid.initialize({ startOnLoad: false });

let input = '';
for await (const chunk of process.stdin) input += chunk;
const results = [];
for (const text of JSON.parse(input)) {
  try {
    const parsed = await mermaid.parse(text);
    results.push({ ok: true, type: parsed.diagramType, error: null });
  } catch (err) {
    results.push({ ok: false, type: null, error: String(err && err.message ? err.message : err) });
  }
}
process.stdout.write(JSON.stringify(results) + '\n');
