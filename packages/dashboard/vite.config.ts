import { defaultClientConditions, defineConfig } from 'vite';

// No React plugin: esbuild compiles JSX with the automatic runtime, which is all a production build
// needs (the plugin adds fast refresh for development only).
export default defineConfig({
  esbuild: { jsx: 'automatic' },
  // The workspace packages (@svc/sdk/verify, @svc/policy-engine) are bundled from their sources, so the
  // dashboard never depends on their dist/ being built first, and always matches the tree it is built in.
  resolve: { conditions: ['@svc/source', ...defaultClientConditions] },
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false },
});
