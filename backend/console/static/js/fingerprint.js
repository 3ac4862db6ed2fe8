// SSH host-key fingerprints as `ssh-keygen -l` prints them: SHA256:<base64 of the SHA-256 of the key
// blob, without padding>. The blob is the base64 field of an OpenSSH public-key line
// ("ssh-ed25519 AAAA... comment"). crypto.subtle exists in secure contexts only (HTTPS or localhost).

export function keyType(line) {
  return String(line || "").trim().split(/\s+/)[0] || null;
}

export async function sshFingerprint(line) {
  const blob = String(line || "").trim().split(/\s+/)[1];
  if (!blob || !globalThis.crypto?.subtle) return null;
  let bytes;
  try {
    bytes = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0));
  } catch {
    return null; // not base64: no fingerprint rather than a wrong one
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return `SHA256:${btoa(String.fromCharCode(...digest)).replace(/=+$/, "")}`;
}
