/**
 * The throughput baseline: a bare node:http server that reads and parses the same JSON body as
 * POST /v1/tools/validate and answers a small JSON document. No framework, no auth, no storage.
 */
import { createServer } from 'node:http';

const port = Number(process.env.PORT ?? 0);
const server = createServer((req, res) => {
  if (req.method === 'GET') {
    res.writeHead(200).end('ok');
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let body: { tool_name?: unknown } = {};
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      res.writeHead(400).end();
      return;
    }
    const out = JSON.stringify({ decision: 'allow', tool: body.tool_name, latency_ms: 0 });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  });
});
server.listen(port, '127.0.0.1', () => {
  const address = server.address();
  console.log(`listening ${typeof address === 'object' && address ? address.port : port}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
