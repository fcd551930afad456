import { defineConfig } from 'vite';

// No React plugin: esbuild compiles JSX with the automatic runtime, which is all a production build
// needs (the plugin adds fast refresh for development only).
export default defineConfig({
  esbuild: { jsx: 'automatic' },
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false },
});
