const LF = 10;
const CR = 13;
const NO_BYTES = new Uint8Array(0);

/**
 * The line ends of an SSE stream that arrives in chunks, as text (the gateway's own Streamable HTTP
 * transport) or as bytes (the HTTP+SSE bodies the SDK's transport reads, bounded before they are
 * decoded): CRLF, LF or CR alone. A CR ending one chunk and an LF starting the next are one line
 * end (a CRLF), not two. Line ends are found with indexOf, each chunk searched once: a line of
 * megabytes arriving in many chunks costs its length, not its length times the chunks.
 *
 * Per chunk: `start(chunk)`, then `next()` as long as it finds a line end; the line's part in this
 * chunk is then [from, to) (it may have begun in earlier chunks), its line end [to, after). Once
 * next() is false, [after, chunk length) begins a line whose end is still to come.
 *
 * Text and bytes are held in fields of their own: one field holding either would make every
 * search polymorphic: the text reader searched about a third slower once bytes had been read too.
 */
export class SseLines {
  from = 0;
  to = 0;
  after = 0;
  /** The chunk being read (let go once it is read: a stream may stay open long after it). */
  private text = '';
  private bytes: Uint8Array = NO_BYTES;
  private isText = true;
  private length = 0;
  /** The first LF and CR at or after `after`, -1 when there is none. */
  private lf = -1;
  private cr = -1;
  /** The last chunk ended on a CR: an LF starting the next one is the rest of its CRLF. */
  private crEnded = false;

  /** Begins reading a chunk; true when it starts with the LF of a CRLF begun in the last one (skipped). */
  start(chunk: string | Uint8Array): boolean {
    let first: number | undefined;
    if (typeof chunk === 'string') {
      this.isText = true;
      this.text = chunk;
      first = chunk.charCodeAt(0);
    } else {
      this.isText = false;
      this.bytes = chunk;
      first = chunk[0];
    }
    this.length = chunk.length;
    this.after = 0;
    let skipped = false;
    if (this.crEnded && this.length > 0) {
      this.crEnded = false;
      if (first === LF) {
        this.after = 1;
        skipped = true;
      }
    }
    this.lf = this.findLf(this.after);
    this.cr = this.findCr(this.after);
    return skipped;
  }

  /** Finds the next line end in the chunk; false when there is none left. */
  next(): boolean {
    const { lf, cr } = this;
    if (lf < 0 && cr < 0) {
      this.text = '';
      this.bytes = NO_BYTES;
      return false;
    }
    const end = cr < 0 || (lf >= 0 && lf < cr) ? lf : cr;
    let after = end + 1;
    // A CR: with an LF right after it, a CRLF (lf is the first LF past the CR); ending the chunk,
    // its LF may start the next one.
    if (end === cr) {
      if (after === this.length) this.crEnded = true;
      else if (lf === after) after++;
    }
    this.from = this.after;
    this.to = end;
    this.after = after;
    if (lf >= 0 && lf < after) this.lf = this.findLf(after);
    if (cr >= 0 && cr < after) this.cr = this.findCr(after);
    return true;
  }

  private findLf(from: number): number {
    return this.isText ? this.text.indexOf('\n', from) : this.bytes.indexOf(LF, from);
  }

  private findCr(from: number): number {
    return this.isText ? this.text.indexOf('\r', from) : this.bytes.indexOf(CR, from);
  }
}
